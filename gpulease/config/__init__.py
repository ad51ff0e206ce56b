"""The one reader of stack configuration: `gpulease:*` keys -> strict typed model -> StackSpec.

Both the Pulumi program (values from ``pulumi.Config``) and the CLI (values read from
``stacks/Pulumi.<stack>.yaml``) go through :func:`parse_stack_config`, which validates
everything, collects every finding, and raises one :class:`ConfigError` listing them all.

By concern: ``schema`` (the pydantic models; docs/config.md is generated from them),
``parse`` (values -> StackSpec, in named steps), ``checks`` (cross-checks on the raw values),
``messages`` (schema errors as findings), ``files`` (stack files), ``locate`` (a finding's
``FILE:LINE:COLUMN``), ``catalogs`` (the catalog a stack plans with). Every name callers use is
importable from ``gpulease.config``.
"""
from gpulease.config.catalogs import catalog_selection, load_stack_catalog
from gpulease.config.files import (MAX_STACK_FILE_BYTES, display_path, find_project_dir,
                                   read_stack_file, stack_file, stack_name_from_path,
                                   values_for_pulumi)
from gpulease.config.locate import locate, located, yaml_marks, yaml_syntax_finding
from gpulease.config.parse import parse_stack_config
from gpulease.config.schema import (AWS_ZONE_PATTERN, CAPACITY_BLOCK_ID_PATTERN,
                                    ENVIRONMENT_PATTERN, GCP_PROJECT_PATTERN, LABEL_VALUE_PATTERN,
                                    MAX_DEMAND_STEPS, MAX_LIFECYCLE_DAYS, MAX_USD,
                                    MAX_WINDOW_HOURS, NAME_PATTERN, NAMESPACE, STRUCTURED_KEYS,
                                    SUBNET_ID_PATTERN, TOP_LEVEL_KEYS,
                                    VPC_ID_PATTERN, AwsCloudConfig, CapacityBlockConfig,
                                    CloudsConfig, ClusterConfig, DemandStepConfig,
                                    GcpCloudConfig, ScheduleWindowConfig, StackConfigModel,
                                    StorageConfig, WindowConfig)

__all__ = [
    "AWS_ZONE_PATTERN", "CAPACITY_BLOCK_ID_PATTERN", "ENVIRONMENT_PATTERN", "GCP_PROJECT_PATTERN",
    "LABEL_VALUE_PATTERN", "MAX_DEMAND_STEPS", "MAX_LIFECYCLE_DAYS", "MAX_STACK_FILE_BYTES",
    "MAX_USD", "MAX_WINDOW_HOURS", "NAME_PATTERN", "NAMESPACE", "STRUCTURED_KEYS",
    "SUBNET_ID_PATTERN", "TOP_LEVEL_KEYS", "VPC_ID_PATTERN",
    "AwsCloudConfig", "CapacityBlockConfig", "CloudsConfig", "ClusterConfig", "DemandStepConfig",
    "GcpCloudConfig", "ScheduleWindowConfig", "StackConfigModel", "StorageConfig", "WindowConfig",
    "catalog_selection", "display_path", "find_project_dir", "load_stack_catalog", "locate",
    "located", "parse_stack_config", "read_stack_file", "stack_file", "stack_name_from_path",
    "values_for_pulumi", "yaml_marks", "yaml_syntax_finding",
]
