"""The layering rules of docs/architecture.md, checked on every import of the code (``ast``, so
an import under ``if TYPE_CHECKING:`` or inside a function counts too): a rule broken fails here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("herald", "herald_cli", "services", "fcm_emulator", "devstack", "bench", "tests")

DRIVERS = frozenset({"pymongo", "bson", "motor", "redis", "aio_pika", "aiormq", "faststream",
                     "aiohttp", "httpx", "fastapi", "starlette", "firebase_admin", "google",
                     "uvloop", "typer", "boto3", "botocore"})
"""Libraries that talk to the outside world (or serve it): the adapters' and entrypoints' tools."""

LEAVES = ("herald.clock", "herald.names", "herald.settings")

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "herald": (),  # the package's own (empty) __init__ only: every module is in a part below
    "herald.domain": ("herald.domain",),
    "herald.contracts": ("herald.contracts", "herald.domain"),
    "herald.clock": (),
    "herald.names": (),
    "herald.settings": (),
    "herald.observability": ("herald.domain",),
    "herald.service_layer": ("herald.service_layer", "herald.contracts", "herald.domain",
                             "herald.clock", "herald.observability"),
    "herald.adapters": ("herald.adapters", "herald.contracts", "herald.domain", *LEAVES,
                        "herald.observability"),
    "herald.runtime": ("herald",),
    "services": ("herald",),  # and its own service, see test_a_service_imports_no_other_service
    "herald_cli": ("herald_cli",),
    "fcm_emulator": ("fcm_emulator",),
}
"""What each part may import of the code of this repository (a prefix of a module's name)."""

NO_DRIVERS = ("herald.domain", "herald.contracts", "herald.service_layer")


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def sources(*tops: str) -> Iterator[Path]:
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


def imported(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, absolute (``from . import x`` resolved); ``from m import
    n`` as ``m.n`` (a module or a name of ``m``, both inside ``m``)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            yield from (f"{module}.{alias.name}" for alias in node.names)


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def part_of(module: str) -> str | None:
    if module == "herald":
        return "herald"
    return next((part for part in sorted(MAY_IMPORT, key=len, reverse=True)
                 if part != "herald" and within(module, part)), None)


def own_service(module: str) -> tuple[str, ...]:
    """A service's modules may import each other (``services.api`` its own routes...)."""
    parts = module.split(".")
    return (".".join(parts[:2]),) if parts[0] == "services" and len(parts) > 1 else ()


def broken_rules() -> Iterator[str]:
    for path in sources("herald", "herald_cli", "services", "fcm_emulator"):
        module = module_name(path)
        part = part_of(module)
        assert part is not None, f"{module} belongs to no part of docs/architecture.md"
        allowed = MAY_IMPORT[part] + own_service(module)
        for target in imported(path):
            if target.split(".")[0] not in OURS:
                continue
            if not any(within(target, prefix) for prefix in allowed):
                yield f"{module} imports {target}"


def test_every_import_follows_the_layering_rules() -> None:
    assert list(broken_rules()) == []


@pytest.mark.parametrize("part", NO_DRIVERS)
def test_the_domain_contracts_and_use_cases_use_no_driver(part: str) -> None:
    found = [f"{module_name(path)} imports {target}"
             for path in sources(part.replace(".", "/")) for target in imported(path)
             if target.split(".")[0] in DRIVERS]
    assert found == []


def test_a_service_imports_no_other_service() -> None:
    found = [f"{module_name(path)} imports {target}"
             for path in sources("services") for target in imported(path)
             if within(target, "services") and target != "services"
             and target.split(".")[1] != module_name(path).split(".")[1]]
    assert found == []


def test_no_adapter_imports_the_service_layer_not_even_its_ports() -> None:
    assert [rule for rule in broken_rules() if rule.startswith("herald.adapters")
            and "herald.service_layer" in rule] == []
    assert not any(within(t, "herald.service_layer")
                   for path in sources("herald/adapters") for t in imported(path))


def test_tests_import_helpers_never_a_conftest_nor_another_test_module() -> None:
    found = [f"{module_name(path)} imports {target}"
             for path in sources("tests") for target in imported(path)
             if within(target, "tests")
             and (target.split(".")[-1] == "conftest" or ".conftest." in f".{target}."
                  or any(part.startswith("test_") for part in target.split(".")))]
    assert found == []


def test_the_rules_catch_a_broken_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: an adapter that imports the service layer is found."""
    fake_root = tmp_path
    (fake_root / "herald" / "adapters").mkdir(parents=True)
    (fake_root / "herald" / "adapters" / "leak.py").write_text(
        "from herald.service_layer.ports import Stores\n")
    for top in ("herald_cli", "services", "fcm_emulator"):
        (fake_root / top).mkdir()
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", fake_root)
    assert list(broken_rules()) == [
        "herald.adapters.leak imports herald.service_layer.ports.Stores"]


def test_one_meaning_per_class_name() -> None:
    """No class name is defined twice in the product's code (a port and its adapter differ:
    ``CancelFlags`` and ``RedisCancelFlags``; a record and its HTTP body: ``CampaignCounts`` and
    ``Counts``)."""
    defined: dict[str, list[str]] = {}
    for path in sources("herald", "herald_cli", "services"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(module_name(path))
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}
