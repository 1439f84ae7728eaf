"""Make PyPI's torchvision importable beside the CPU torch, for SGLang's CPU environment.

PyPI's torchvision wheels are CUDA builds: their C++ ops (`torchvision/_C.so`) do not load beside a
`+cpu` torch. torchvision copes with that (`torchvision.extension._has_ops()` is False and
`register_meta` skips its meta kernels) except for two fake-op registrations in
`torchvision/_meta_registrations.py`, `@torch.library.register_fake("torchvision::nms")` and `::qnms`,
which run unconditionally and make `import torchvision` fail with "operator torchvision::nms does not
exist". SGLang's server imports `torchvision.transforms` (image preprocessing, no C++ ops), so this
rewrites those two decorators to skip the registration when the ops are not loaded. No CPU build of
torchvision is on PyPI to install instead.

Run with the environment's interpreter; idempotent. Exits non-zero, saying why, when the file does not
look as expected (another torchvision release), rather than patching blind.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

MARK = "def _register_fake_if_loaded("
ANCHOR = "import torchvision.extension  # noqa: F401\n"
GUARDED_OPS = ("torchvision::nms", "torchvision::qnms")
HELPER = f'''

# Added by grpo's scripts/sglang_cpu_shim/patch_torchvision.py: this CUDA build's C++ ops do not load
# beside a CPU torch, and registering a fake kernel for an op that does not exist fails.
{MARK}op_name):
    if torchvision.extension._has_ops():
        return torch.library.register_fake(op_name)
    return lambda fn: fn
'''


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        print("patch_torchvision: torchvision is not installed in this environment", file=sys.stderr)
        return 1
    path = Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
    text = path.read_text()
    if MARK in text:
        return 0
    decorators = [f'@torch.library.register_fake("{op}")' for op in GUARDED_OPS]
    if text.count(ANCHOR) != 1 or any(text.count(d) != 1 for d in decorators) \
            or text.count("@torch.library.register_fake(") != len(decorators):
        print(f"patch_torchvision: {path} is not laid out as in torchvision 0.28.0 (one `{ANCHOR.strip()}`, "
              f"register_fake only for {', '.join(GUARDED_OPS)}); pin torchvision==0.28.0 or adapt the patch",
              file=sys.stderr)
        return 1
    text = text.replace(ANCHOR, ANCHOR + HELPER, 1)
    for decorator in decorators:
        text = text.replace(decorator, decorator.replace("torch.library.register_fake(", "_register_fake_if_loaded("))
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
