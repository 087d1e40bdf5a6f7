"""The Modal stand-ins expose nothing the real classes lack.

Compared by introspection of the installed modal package (pinned `modal==1.6.*`; read at 1.6.4):
every public attribute of a stand-in class must exist on the real class, a method's parameters
must be ones the real method accepts, and a property must be a property there too. So code that
passes against tests/modal_standin.py cannot call something Modal does not have. The earlier
Sandbox stand-in failed this: it exposed `created`, `kwargs`, `processes`, `command_map`, ... and
a plain `returncode` attribute. (Its reader's `close()` does exist on modal 1.6.4's blocking
StreamReader, as synchronicity's undocumented alias of `aclose()`, which leaves a stream that
another thread is reading open; our transport no longer calls it, and the stand-in no longer
offers it.) What tests steer the stand-ins with is private (`_`) or lives in `SANDBOXES`.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import modal
import modal.container_process
import modal.io_streams
import pytest

from modal_standin import (TERMINATED_RETURNCODE, TIMEOUT_RETURNCODE, SandboxStandIn, VolumeStandIn, _Process,
                           _Reader, _Writer)

PAIRS = [
    (SandboxStandIn, modal.Sandbox),
    (_Process, modal.container_process.ContainerProcess),
    (_Reader, modal.io_streams.StreamReader),
    (_Writer, modal.io_streams.StreamWriter),
    (VolumeStandIn, modal.Volume),
]


def public(cls) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def instance_public(standin) -> set[str]:
    """Public attributes a stand-in instance gets in __init__ (not visible on the class)."""
    import ast
    import textwrap

    source = textwrap.dedent(inspect.getsource(standin.__init__))
    return {node.attr for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and getattr(node.value, "id", "") == "self" and not node.attr.startswith("_")}


def test_the_installed_modal_is_the_pinned_minor():
    assert version("modal").startswith("1.6.")


@pytest.mark.parametrize("standin,real", PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_a_stand_in_has_only_attributes_the_real_class_has(standin, real):
    extra = (public(standin) | instance_public(standin)) - public(real)
    assert extra == set(), f"{standin.__name__} offers {sorted(extra)}, which modal.{real.__name__} does not have"


@pytest.mark.parametrize("standin,real", PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_a_stand_in_method_takes_only_parameters_the_real_one_takes(standin, real):
    for name in public(standin):
        ours, theirs = inspect.getattr_static(standin, name), inspect.getattr_static(real, name)
        if isinstance(ours, property):
            assert isinstance(theirs, property), f"{standin.__name__}.{name} is a property, not on modal"
            continue
        if not callable(getattr(standin, name)):
            continue
        their_parameters = inspect.signature(getattr(real, name)).parameters
        for parameter in inspect.signature(getattr(standin, name)).parameters.values():
            if parameter.name in ("self", "cls") or parameter.kind is parameter.VAR_KEYWORD:
                continue
            assert parameter.name in their_parameters, \
                f"{standin.__name__}.{name}({parameter.name}=...): modal.{real.__name__}.{name} has no such parameter"
            assert their_parameters[parameter.name].kind == parameter.kind, f"{standin.__name__}.{name}({parameter.name})"


def test_the_return_codes_are_the_clients():
    """modal/sandbox/_common.py `_result_returncode`: timeout 124, terminated 137."""
    from modal.sandbox._common import _result_returncode
    from modal_proto import api_pb2

    def code(status):
        return _result_returncode(api_pb2.GenericResult(status=status))

    assert code(api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT) == TIMEOUT_RETURNCODE == 124
    assert code(api_pb2.GenericResult.GENERIC_STATUS_TERMINATED) == TERMINATED_RETURNCODE == 137
    assert code(api_pb2.GenericResult.GENERIC_STATUS_UNSPECIFIED) is None  # still running: poll() is None
