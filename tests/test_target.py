"""The host target: LLVM's CPU name plus the vector/matrix extensions the CPU reports that the name lacks."""

import pytest

from workbench import tvm_env
from workbench.errors import WorkbenchError


@pytest.fixture
def flags(monkeypatch):
    def use(fs):
        monkeypatch.setattr(tvm_env, "host_cpu_flags", lambda: frozenset(fs))
        tvm_env.host_mattr.cache_clear()

    yield use
    tvm_env.host_mattr.cache_clear()


def test_features_the_cpu_name_lacks_are_added_and_no_others(flags):
    flags({"avx2", "fma", "avx512_bf16", "amx_int8", "sse4_2"})
    # haswell has AVX2 and FMA by default; BF16 and AMX-INT8 it has not; sse4_2 is not an extension we map
    assert tvm_env.host_mattr("haswell") == ("+amx-int8", "+avx512bf16")
    flags({"avx2", "fma"})
    assert tvm_env.host_mattr("haswell") == ()


def test_the_host_target_has_every_extension_the_cpu_reports():
    import tvm
    from tvm.target import codegen

    t = tvm_env.host_target_dict(2)
    assert t["kind"] == "llvm" and t["num-cores"] == 2 and t["mcpu"] == tvm_env.host_mcpu()
    have = [f for flag, f in tvm_env.CPU_FLAG_FEATURES.items() if flag in tvm_env.host_cpu_flags()]
    assert codegen.llvm_cpu_has_features(have, tvm.target.Target(t)) if have else True
    assert tvm_env.parse_target("host") == tvm_env.host_target_dict()


def test_explicit_mattr_is_accepted_as_a_list_or_llvm_string_and_checked():
    t = tvm_env.parse_target('{"kind": "llvm", "mcpu": "znver4", "mattr": "+avx512bf16, +avx512vnni"}')
    assert t["mattr"] == ["+avx512bf16", "+avx512vnni"] and t["mcpu"] == "znver4"
    assert "mattr" not in tvm_env.parse_target('{"kind": "llvm", "mcpu": "znver4"}')  # the user's CPU, as given
    with pytest.raises(WorkbenchError, match="invalid target .*mattr"):
        tvm_env.parse_target('{"kind": "llvm", "mattr": 7}')
