"""The committed gRPC stubs are what `make protos` generates from protos/ now."""

from __future__ import annotations

import filecmp

from support.paths import REPO_ROOT
from support.scripts import load_script

ROOT = REPO_ROOT
GENERATED = ROOT / "src"


def test_committed_stubs_match_the_protos(tmp_path):
    generator = load_script("gen_protos", ROOT / "scripts" / "gen_protos.py")
    generator.generate(tmp_path)
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*_pb2*"))
    assert fresh, "no stubs generated"
    stale = [
        p
        for p in fresh
        if not (GENERATED / p).exists()
        or not filecmp.cmp(tmp_path / p, GENERATED / p, shallow=False)
    ]
    assert not stale, f"stubs out of date, run `make protos`: {[str(p) for p in stale]}"
    committed = {
        p.relative_to(GENERATED)
        for p in (GENERATED / "turnpike").rglob("*_pb2*")
        if p.suffix in (".py", ".pyi")
    }
    orphans = committed - set(fresh)
    assert not orphans, f"stubs without a proto: {sorted(map(str, orphans))}"


def test_every_backend_service_has_a_versioned_package():
    packages = {p.parent.parent.name for p in (ROOT / "protos" / "turnpike").rglob("*.proto")}
    assert {"safety", "tokenizer", "router", "inference", "billing", "imageres"} <= packages
    for proto in (ROOT / "protos").rglob("*.proto"):
        text = proto.read_text()
        package = ".".join(proto.relative_to(ROOT / "protos").parent.parts)
        assert f"package {package};" in text, f"{proto} must declare package {package}"
