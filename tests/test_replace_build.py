"""The extractor of replace-forcing attributes (tools/replace_build.py) on small Go
sources written for the test in the shapes the Terraform providers use (SDKv2 schema maps,
plugin-framework plan modifiers, helper functions, attribute-name constants)."""
from __future__ import annotations

from tools import replace_build as B

SDK = '''
package ec2

const attrPrefix = "name_prefix"

var sharedElem = &schema.Resource{
	Schema: map[string]*schema.Schema{
		"device_index": {Type: schema.TypeInt, Optional: true, ForceNew: true},
	},
}

// @SDKResource("aws_widget", name="Widget")
func resourceWidget() *schema.Resource {
	return &schema.Resource{
		CreateWithoutTimeout: resourceWidgetCreate,
		CustomizeDiff: customdiff.ForceNewIfChange("size", func() bool { return true }),
		SchemaFunc: func() map[string]*schema.Schema {
			return map[string]*schema.Schema{
				names.AttrName: {
					Type:     schema.TypeString,
					ForceNew: true, // a rename is a new widget
				},
				attrPrefix: {Type: schema.TypeString, ForceNew: true},
				"size": {Type: schema.TypeInt, Optional: true},
				"network_interface": {
					Type: schema.TypeList,
					Optional: true,
					Elem: sharedElem,
				},
				"placement": {
					Type: schema.TypeList, MaxItems: 1, Optional: true,
					Elem: placementSchema(),
				},
				names.AttrTags: tftags.TagsSchemaForceNew(),
				"description": {Type: schema.TypeString, Description: "ForceNew: true is not set"},
			}
		},
	}
}

func placementSchema() *schema.Resource {
	return &schema.Resource{Schema: map[string]*schema.Schema{
		"group_name": {Type: schema.TypeString, ForceNew: true},
		"tenancy":    {Type: schema.TypeString},
	}}
}
'''

FRAMEWORK = '''
package ec2

// @FrameworkResource("aws_block",name="Block")
func newBlockResource(context.Context) (resource.ResourceWithConfigure, error) {
	r := &blockResource{}
	return r, nil
}

func (r *blockResource) Schema(ctx context.Context, _ resource.SchemaRequest, response *resource.SchemaResponse) {
	s := schema.Schema{
		Attributes: map[string]schema.Attribute{
			"offering_id": schema.StringAttribute{
				Required: true,
				PlanModifiers: []planmodifier.String{
					stringplanmodifier.RequiresReplace(),
				},
			},
			"platform": schema.StringAttribute{
				PlanModifiers: []planmodifier.String{
					stringplanmodifier.RequiresReplaceIfConfigured(),
				},
			},
			names.AttrARN: schema.StringAttribute{Computed: true},
		},
		Blocks: map[string]schema.Block{
			"timeouts": schema.SingleNestedBlock{
				Attributes: map[string]schema.Attribute{},
			},
		},
	}
	response.Schema = s
}
'''


class FakeSnapshot:
    def __init__(self, files):
        self.files = files

    def show(self, path):
        return self.files[path]

    def ls(self, directory):
        return [p for p in self.files if p.startswith(directory.rstrip("/") + "/")]


def test_sdk_schema_force_new_attributes_nested_and_from_helpers():
    snap = FakeSnapshot({"internal/service/ec2/widget.go": SDK})
    pkg = B.Package(snap, "internal/service/ec2").load()
    attrs = B.Extractor(pkg, {"Name": "name", "Tags": "tags"}).sdk_resource("resourceWidget")
    forced = sorted(".".join(p) for p, a in B.paths(attrs) if a.force)
    assert forced == ["name", "name_prefix", "network_interface.device_index",
                      "placement.group_name", "tags"]
    assert sorted(attrs) == ["description", "name", "name_prefix", "network_interface",
                             "placement", "size", "tags"]
    assert B.conditional_in(SDK) == {"size"}


def test_framework_requires_replace_and_conditional():
    snap = FakeSnapshot({"internal/service/ec2/block.go": FRAMEWORK})
    pkg = B.Package(snap, "internal/service/ec2").load()
    attrs = B.Extractor(pkg, {"ARN": "arn"}).fw_resource("blockResource")
    assert {k: (a.force, a.conditional) for k, a in attrs.items()} == {
        "offering_id": (True, False), "platform": (False, True), "arn": (False, False),
        "timeouts": (False, False)}


def test_terraform_paths_map_to_the_sdks_input_names():
    # pluralized lists and nested input types, read from the installed Pulumi SDKs
    tmpl = "gcp:compute/instanceTemplate:InstanceTemplate"
    assert B.pulumi_path(tmpl, ("network_interface", "access_config", "nat_ip")) == \
        "networkInterfaces.accessConfigs.natIp"
    assert B.pulumi_path(tmpl, ("guest_accelerator", "type")) == "guestAccelerators.type"
    assert B.pulumi_path("aws:ec2/capacityBlockReservation:CapacityBlockReservation",
                         ("capacity_block_offering_id",)) == "capacityBlockOfferingId"
    # a name XArgs taken by another resource's nested type (pulumi_aws.s3)
    assert B.pulumi_path("aws:s3/bucketVersioning:BucketVersioning", ("bucket",)) == "bucket"
    # renamed by pulumi-aws: aws_lambda_function.function_name is `name`
    assert B.pulumi_path("aws:lambda/function:Function", ("function_name",)) == "name"
    assert B.pulumi_path("aws:ec2/eip:Eip", ("vpc",)) is None      # not an input in v7
