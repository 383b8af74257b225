"""The policy's JSON Schema: the committed file is the generated one, every policy file in
config/ validates against it and names it for editors, and invalid policies are refused by the
schema and by the loader alike."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from admission.cli import main
from admission.policy import Policy, Tenant, check_text
from admission.policy.schema import (
    MODELINE,
    SCHEMA_FILE,
    missing_descriptions,
    policy_schema,
    render_schema,
    unknown_descriptions,
)

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / SCHEMA_FILE
REGENERATE = f"run `berth docs` (or `berth policy schema --out {SCHEMA_FILE}`) to regenerate it"


def _policy_files() -> list[Path]:
    """Every Berth policy under config/: the samples and the overlays' and components'."""
    found = []
    for path in sorted((ROOT / "config").rglob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        if any(isinstance(d, dict) and d.get("kind") == "Policy"
               and str(d.get("apiVersion", "")).startswith("berth.dev/") for d in docs):
            found.append(path)
    return found


POLICY_FILES = _policy_files()


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = policy_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _schema_errors(validator: jsonschema.Draft202012Validator, data: Any) -> list[str]:
    return [".".join(map(str, e.absolute_path)) for e in validator.iter_errors(data)]


def test_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA.is_file(), f"{SCHEMA_FILE} is missing; {REGENERATE}"
    committed = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert committed == policy_schema(), f"{SCHEMA_FILE} is stale; {REGENERATE}"


def test_schema_is_draft_2020_12_with_id_title_and_description() -> None:
    schema = policy_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("https://") and schema["$id"].endswith(".json")
    assert schema["title"] and schema["description"]
    assert schema["additionalProperties"] is False


def test_every_field_is_described() -> None:
    assert missing_descriptions() == [], (
        "fields without a description: add Field(description=...) in admission/policy/model.py "
        "or an entry in FIELD_DOCS (admission/policy/schema.py), then run `berth docs`")
    assert unknown_descriptions() == [], "FIELD_DOCS names fields the model no longer has"


def test_the_config_holds_the_samples_and_the_overlay_policies() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in POLICY_FILES}
    assert {"config/policy/sample-policy.yaml", "config/policy/minimal-policy.yaml",
            "config/base/policy.yaml", "config/overlays/standalone/policy.yaml",
            "config/components/kueue/policy.yaml", "config/components/volcano/policy.yaml"} <= names


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_policy_files_validate_against_the_schema_and_load(
        path: Path, validator: jsonschema.Draft202012Validator) -> None:
    text = path.read_text(encoding="utf-8")
    assert _schema_errors(validator, yaml.safe_load(text)) == []
    policy, issues = check_text(text)
    assert policy is not None, issues


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_policy_files_name_the_schema_for_editors(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith(MODELINE), f"{path}: first line should be {MODELINE}<path>"
    target = (path.parent / first.removeprefix(MODELINE).strip()).resolve()
    assert target == SCHEMA.resolve(), f"{path}: the modeline points at {target}"


def test_defaults_and_a_loaded_policy_dump_to_valid_documents(
        validator: jsonschema.Draft202012Validator) -> None:
    bare = Policy(tenants=[Tenant(name="a", namespaces=["a"])])
    assert _schema_errors(validator, bare.model_dump(by_alias=True, mode="json")) == []
    sample, _ = check_text((ROOT / "config/policy/sample-policy.yaml").read_text())
    assert sample is not None
    assert _schema_errors(validator, sample.model_dump(by_alias=True, mode="json")) == []


TENANT = "tenants:\n  - name: team-a\n    namespaces: [team-a]\n"
INVALID = {
    # name: (policy text, path the loader names, path the schema names)
    "unknown key": ("tenants:\n  - name: team-a\n    namespaces: [team-a]\n    wieght: 2\n",
                    "tenants[0].wieght", "tenants.0"),
    "negative quota": ("tenants:\n  - name: team-a\n    namespaces: [team-a]\n"
                       "    quota: {gpus: -1}\n", "tenants[0].quota.gpus", "tenants.0.quota.gpus"),
    "tenant name not a DNS label": ("tenants:\n  - name: Team_A\n    namespaces: [team-a]\n",
                                    "tenants[0].name", "tenants.0.name"),
    "no tenants": ("kind: Policy\n", "tenants", ""),
    "wrong apiVersion": (f"apiVersion: berth.dev/v2\n{TENANT}", "apiVersion", "apiVersion"),
    "unknown sharing backend": (f"{TENANT}sharing: {{backend: vgpu}}\n", "sharing.backend",
                                "sharing.backend"),
    "window of zero": (f"{TENANT}batch: {{windowSeconds: 0}}\n", "batch.windowSeconds",
                       "batch.windowSeconds"),
    "fraction above one": (f"{TENANT}sharing: {{fractionGrid: [0.5, 1.5]}}\n",
                           "sharing.fractionGrid[1]", "sharing.fractionGrid.1"),
    "latency-sensitive class without an SLO": (
        f"{TENANT}qosClasses:\n  - {{name: serve, latencySensitive: true}}\n",
        "qosClasses[0]", "qosClasses.0"),
    "topology level without its node label": (
        f"{TENANT}topology:\n  levels: [{{name: nvlink}}, {{name: rack}}]\n",
        "topology.levels[1].nodeLabel", "topology.levels.1"),
    "kueue release without the tenant's queue": (
        f"{TENANT}release: {{backend: kueue}}\n", "tenants[0].queues.kueue", "tenants.0"),
}


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_policies_are_refused_by_schema_and_loader(
        name: str, validator: jsonschema.Draft202012Validator) -> None:
    text, loader_path, schema_path = INVALID[name]
    text = textwrap.dedent(text)
    policy, issues = check_text(text)
    assert policy is None
    assert loader_path in [i.path for i in issues], issues
    assert schema_path in _schema_errors(validator, yaml.safe_load(text))


def test_policy_schema_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == policy_schema()
    out = tmp_path / "policy.schema.json"
    assert main(["policy", "schema", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render_schema()
    assert main(["policy", "schema", "--out", str(tmp_path / "no" / "such" / "dir.json")]) == 2
