"""The commands' per-cloud part, one module per cloud (``Cloud.cli_module``): the clients each
command creates there from its flags, and the words of what it reads (``NEEDS``)."""
