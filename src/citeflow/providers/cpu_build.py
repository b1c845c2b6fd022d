"""Which CPU instructions the local llama.cpp runtime uses, and the build options for more.

The ``xllamacpp`` wheel on PyPI is built for AVX2. On a CPU with AVX-512 (VNNI), llama.cpp
built for it reads a prompt about 1.6 times as fast: `llama-bench -p 512`, Qwen2.5-Coder-1.5B
Q4_K_M, 2 threads, 61-62 against 37-38 tokens/s on this project's 2-core Xeon; decoding is
about the same (~10 tokens/s). Reading the prompt is most of a local answer, so
`make native` rebuilds the wheel from its source with the options `cmake_args` gives.

AMX is left off on purpose: under a hypervisor that does not enable its tile state, llama.cpp's
AMX kernels stop the process with an illegal instruction (seen on this project's machines).
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable
from pathlib import Path

# llama.cpp (ggml) CMake option → the /proc/cpuinfo flags it needs, in ggml's own order.
X86_OPTIONS: tuple[tuple[str, frozenset[str]], ...] = (
    ("GGML_SSE42", frozenset({"sse4_2"})),
    ("GGML_AVX", frozenset({"avx"})),
    ("GGML_F16C", frozenset({"f16c"})),
    ("GGML_FMA", frozenset({"fma"})),
    ("GGML_BMI2", frozenset({"bmi2"})),
    ("GGML_AVX2", frozenset({"avx2"})),
    ("GGML_AVX_VNNI", frozenset({"avx_vnni"})),
    ("GGML_AVX512", frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})),
    ("GGML_AVX512_VBMI", frozenset({"avx512vbmi"})),
    ("GGML_AVX512_VNNI", frozenset({"avx512_vnni"})),
    ("GGML_AVX512_BF16", frozenset({"avx512_bf16"})),
)

# Always: nothing fetched at build time (llguidance's Rust crates, BoringSSL's git repository);
# citeflow's JSON schemas go through llama.cpp's own grammar, not llguidance.
OFFLINE_ARGS = ("-DLLAMA_LLGUIDANCE=OFF", "-DLLAMA_BUILD_BORINGSSL=OFF")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where there is none)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def cmake_args(flags: Iterable[str], machine: str | None = None) -> list[str]:
    """llama.cpp's CMake options for a CPU with ``flags``: each x86 extension it has, switched on.

    Off x86 (ARM), llama.cpp's own ``GGML_NATIVE`` detection is used; it has no AMX to avoid.
    """
    machine = (machine or platform.machine()).lower()
    if machine not in {"x86_64", "amd64"}:
        return ["-DGGML_NATIVE=ON", *OFFLINE_ARGS]
    have = set(flags)
    options = [name for name, needs in X86_OPTIONS if needs <= have]
    return ["-DGGML_NATIVE=OFF", *(f"-D{name}=ON" for name in options), *OFFLINE_ARGS]


def runtime_features(system_info: str) -> frozenset[str]:
    """The CPU features llama.cpp was built with, from ``xllamacpp.get_system_info()``."""
    return frozenset(re.findall(r"(\w+) = 1", system_info))


def installed_runtime() -> tuple[str, frozenset[str]]:
    """The installed xllamacpp's version and the CPU features its llama.cpp was built with."""
    from citeflow.providers.llamacpp_engine import import_xllamacpp

    xllamacpp = import_xllamacpp()
    return str(xllamacpp.__version__), runtime_features(xllamacpp.get_system_info())


def missing_speedups(flags: Iterable[str], built: Iterable[str]) -> list[str]:
    """The AVX-512 options this CPU supports that the installed runtime was built without."""
    have, built_with = set(flags), set(built)
    supported = (name.removeprefix("GGML_") for name, needs in X86_OPTIONS if needs <= have)
    return [name for name in supported if name.startswith("AVX512") and name not in built_with]


def rebuild_hint(flags: Iterable[str], built: Iterable[str]) -> str | None:
    """One line telling the user that `make native` would speed the runtime up, if it would."""
    missing = missing_speedups(flags, built)
    if not missing:
        return None
    return (
        f"this CPU also has {', '.join(missing)}: `make native` rebuilds llama.cpp for it "
        "(about 11 minutes on 2 cores; prompts read about 1.6x as fast)"
    )
