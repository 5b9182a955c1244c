"""The findings JSON: exactly Diagnosis.to_dict(), strict JSON, valid against the schema."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from report_samples import sample_diagnosis

from trainmedic.diagnose.finding import Diagnosis, Evidence, Finding
from trainmedic.report import findings_schema, to_json, validate_findings_json
from trainmedic.report.findings_json import SchemaValidator


def test_round_trip_equals_to_dict(diagnosis) -> None:
    text = to_json(diagnosis)
    obj = json.loads(text)
    # NaN in the evidence is the string "nan", so the comparison is exact.
    assert obj == diagnosis.to_dict()
    assert obj["findings"][2]["evidence"][0]["value"] == "nan"
    validate_findings_json(obj)
    validate_findings_json(text)


def test_strict_json_and_deterministic(diagnosis) -> None:
    text = to_json(diagnosis)
    assert ": NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert to_json(sample_diagnosis()) == text
    assert list(json.loads(text)) == ["schema", "source", "metrics_seen", "checks_not_run",
                                      "findings", "notes", "loss_found", "mapping"]
    assert "\n" not in to_json(diagnosis, indent=None)


def test_numpy_scalars_from_detectors_are_written() -> None:
    f = Finding("loss_spike", "warning", 0.9, np.int64(12), "spike",  # type: ignore[arg-type]
                (Evidence("loss", np.int64(12), np.float32(3.5), np.float64("inf")),),  # type: ignore[arg-type]
                end_step=np.int64(13))  # type: ignore[arg-type]
    d = Diagnosis(source="x", metrics_seen=["loss"], findings=[f])
    obj = json.loads(to_json(d))
    validate_findings_json(obj)
    assert obj["findings"][0]["onset_step"] == 12
    assert obj["findings"][0]["evidence"][0]["reference"] == "inf"


def test_empty_diagnosis_validates() -> None:
    validate_findings_json(json.loads(to_json(Diagnosis(source="", metrics_seen=[]))))


def test_a_run_without_a_recognised_loss_names_its_candidates_and_validates() -> None:
    d = Diagnosis(source="x", metrics_seen=["le", "eit"], loss_found=False,
                  loss_candidates=["le"])
    obj = json.loads(to_json(d))
    validate_findings_json(obj)
    assert obj["loss_candidates"] == ["le"]
    assert "loss_candidates" not in Diagnosis(source="x", metrics_seen=["loss"]).to_dict()


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda o: o.update(schema="trainmedic.findings/2"), "$.schema"),
    (lambda o: o.pop("metrics_seen"), "$.metrics_seen"),
    (lambda o: o["findings"][0].update(severity="fatal"), "$.findings[0].severity"),
    (lambda o: o["findings"][0].update(confidence=1.5), "$.findings[0].confidence"),
    (lambda o: o["findings"][1]["evidence"][0].update(basis="guessed"),
     "$.findings[1].evidence[0].basis"),
    (lambda o: o["findings"][1]["evidence"][0].update(value=float("nan")),
     "$.findings[1].evidence[0].value"),
    (lambda o: o["findings"][1]["evidence"][0].update(value="NaN"),
     "$.findings[1].evidence[0].value"),
    (lambda o: o["findings"][1]["causes"][0].update(checked_against_data="yes"),
     "$.findings[1].causes[0].checked_against_data"),
    (lambda o: o["findings"][1]["interventions"][0].pop("verify"),
     "$.findings[1].interventions[0].verify"),
    (lambda o: o["findings"][0].update(onset_step=1.5), "$.findings[0].onset_step"),
    (lambda o: o["findings"][0].update(end_step=0, onset_step=10), "$.findings[0].end_step"),
    (lambda o: o["findings"][0].update(extra=1), "$.findings[0].extra"),
    (lambda o: o["checks_not_run"][0].update(missing="loss_scale"),
     "$.checks_not_run[0].missing"),
    (lambda o: o["findings"][0].update(rank=True), "$.findings[0].rank"),
])
def test_validator_names_the_first_bad_field(diagnosis, mutate, field) -> None:
    obj = json.loads(to_json(diagnosis))
    bad = copy.deepcopy(obj)
    mutate(bad)
    with pytest.raises(ValueError) as err:
        validate_findings_json(bad)
    assert str(err.value).startswith(field + ":"), str(err.value)


def test_not_json_text() -> None:
    with pytest.raises(ValueError, match=r"^\$: not JSON"):
        validate_findings_json("{oops")


def test_schema_file_is_well_formed_and_matches_to_dict_keys(diagnosis) -> None:
    schema = findings_schema()
    SchemaValidator(schema)  # refuses keywords it does not implement
    assert schema["properties"]["schema"]["const"] == "trainmedic.findings/1"
    obj = diagnosis.to_dict()
    # Every key the dataclasses write is declared, and every required key is written.
    assert set(schema["required"]) == set(obj)
    defs = schema["$defs"]
    f = obj["findings"][1]
    assert set(defs["finding"]["required"]) == set(f)
    assert set(defs["evidence"]["required"]) == set(f["evidence"][0])
    assert set(defs["intervention"]["required"]) == set(f["interventions"][0])
    assert set(defs["cause"]["properties"]) >= set(f["causes"][0])
    assert set(defs["check_not_run"]["properties"]) >= set(obj["checks_not_run"][1])


def test_schema_validator_refuses_unknown_keywords() -> None:
    with pytest.raises(ValueError, match="unsupported keyword"):
        SchemaValidator({"type": "object", "patternProperties": {}})


def test_against_jsonschema_when_available(diagnosis) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(to_json(diagnosis)), findings_schema())
