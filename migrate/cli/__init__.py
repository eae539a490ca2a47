"""The ``vrmig`` command line: one parser, subcommands as modules."""
