"""The local runtime's build options for a CPU, and what a rebuild would add. No compiler runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeflow.cli import main
from citeflow.providers import cpu_build

XEON = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "flags\t\t: fpu sse4_2 avx f16c fma bmi2 avx2 avx_vnni avx512f avx512cd avx512vl avx512dq "
    "avx512bw avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16\n\n"
    "processor\t: 1\nflags\t\t: fpu\n"
)
AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse4_2 avx f16c fma bmi2 avx2\n"
# xllamacpp.get_system_info() of the PyPI wheel, as printed on this project's machine.
WHEEL_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
#: what the XEON has that the wheel was not built for
XEON_BEYOND_WHEEL = ["AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"]


def flags_of(tmp_path: Path, text: str) -> frozenset[str]:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    return cpu_build.cpu_flags(cpuinfo)


def test_an_avx512_cpu_gets_every_extension_it_has_and_never_amx(tmp_path: Path) -> None:
    args = cpu_build.cmake_args(flags_of(tmp_path, XEON), machine="x86_64")
    assert args[0] == "-DGGML_NATIVE=OFF"  # -march=native would switch AMX on
    for name in ("AVX2", "AVX_VNNI", *XEON_BEYOND_WHEEL):
        assert f"-DGGML_{name}=ON" in args
    assert not any("AMX" in arg for arg in args)
    assert "-DLLAMA_LLGUIDANCE=OFF" in args and "-DLLAMA_BUILD_BORINGSSL=OFF" in args


def test_an_avx2_cpu_gets_no_avx512(tmp_path: Path) -> None:
    args = cpu_build.cmake_args(flags_of(tmp_path, AVX2_ONLY), machine="x86_64")
    assert "-DGGML_AVX2=ON" in args and "-DGGML_FMA=ON" in args
    assert not any("AVX512" in arg or "VNNI" in arg for arg in args)


def test_avx512_needs_all_five_of_its_parts(tmp_path: Path) -> None:
    partial = XEON.replace("avx512bw ", "")
    args = cpu_build.cmake_args(flags_of(tmp_path, partial), machine="x86_64")
    assert "-DGGML_AVX512=ON" not in args
    assert "-DGGML_AVX512_VNNI=ON" in args  # a part with its own flag still counts


def test_arm_uses_llama_cpp_s_own_detection() -> None:
    assert cpu_build.cmake_args({"asimd"}, machine="aarch64")[0] == "-DGGML_NATIVE=ON"


def test_a_missing_cpuinfo_means_no_flags(tmp_path: Path) -> None:
    assert cpu_build.cpu_flags(tmp_path / "absent") == frozenset()


def test_a_rebuild_is_suggested_only_for_what_the_runtime_lacks(tmp_path: Path) -> None:
    built = cpu_build.runtime_features(WHEEL_INFO)
    assert {"AVX2", "FMA"} <= built and "AVX512" not in built
    xeon = flags_of(tmp_path, XEON)
    assert cpu_build.missing_speedups(xeon, built) == XEON_BEYOND_WHEEL
    rebuilt = built | set(XEON_BEYOND_WHEEL)
    assert cpu_build.missing_speedups(xeon, rebuilt) == []
    assert cpu_build.missing_speedups(flags_of(tmp_path, AVX2_ONLY), built) == []
    hint = cpu_build.rebuild_hint(xeon, built)
    assert hint is not None and "make native" in hint and "AVX512_VNNI" in hint
    assert cpu_build.rebuild_hint(xeon, rebuilt) is None


def test_the_cli_prints_the_build_options_for_the_makefile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["models", "runtime", "--cmake-args"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.splitlines() == [out] and "-DLLAMA_LLGUIDANCE=OFF" in out


def test_the_cli_names_the_runtime_s_instructions(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("xllamacpp")
    assert main(["models", "runtime"]) == 0
    assert "uses:" in capsys.readouterr().out


def test_the_cli_says_by_its_exit_status_whether_a_rebuild_would_help(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make model` rebuilds llama.cpp only when the runtime lacks what the CPU has."""
    xeon = flags_of(tmp_path, XEON)
    wheel = cpu_build.runtime_features(WHEEL_INFO)
    monkeypatch.setattr(cpu_build, "cpu_flags", lambda: xeon)
    monkeypatch.setattr(cpu_build, "installed_runtime", lambda: ("0.0", wheel))
    assert main(["models", "runtime", "--needs-rebuild"]) == 0
    assert "make native" in capsys.readouterr().out
    rebuilt = wheel | set(cpu_build.missing_speedups(xeon, wheel))
    monkeypatch.setattr(cpu_build, "installed_runtime", lambda: ("0.0", rebuilt))
    assert main(["models", "runtime", "--needs-rebuild"]) == 1
    assert capsys.readouterr().out == ""
