"""speckeys.has_shutdown_timeout: the serve CLI's drain flag, read by AST."""

from specdeploy.node.patching import speckeys

WITH = """
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--shutdown-timeout", type=int, default=0)
"""
WITHOUT = """
HELP = "--shutdown-timeout is not here"  # a mention in a string is not the flag
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--max-model-len", type=int)
"""


def test_flag_found_only_as_an_argument() -> None:
    assert speckeys.has_shutdown_timeout(WITH) is True
    assert speckeys.has_shutdown_timeout(WITHOUT) is False
