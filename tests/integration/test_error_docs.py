"""The OpenAPI document declares every error an operation answers (what the schemathesis run in
``tests/e2e/test_fuzz.py`` holds the api to), and answers found by fuzzing stay fixed."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from tests.support import error_code

ERROR_REF = "#/components/schemas/ErrorResponse"


def _operations(app: FastAPI) -> dict[str, dict[str, object]]:
    document = app.openapi()
    return {f"{method.upper()} {path}": operation
            for path, methods in document["paths"].items()
            for method, operation in methods.items()}


def _error_ref(operation: dict[str, object], status: str) -> str:
    responses = operation["responses"]
    assert isinstance(responses, dict)
    return str(responses[status]["content"]["application/json"]["schema"]["$ref"])


async def test_every_scoped_operation_documents_its_refusals(api_app: FastAPI) -> None:
    for label, operation in _operations(api_app).items():
        if "x-herald-scope" not in operation:
            continue
        assert _error_ref(operation, "401") == ERROR_REF, label
        if "requestBody" in operation:
            for status in ("400", "413", "422"):
                assert _error_ref(operation, status) == ERROR_REF, (label, status)
        if "{" in label:
            assert _error_ref(operation, "404") == ERROR_REF, label


async def test_validation_errors_are_documented_in_herald_shape(api_app: FastAPI) -> None:
    operation = _operations(api_app)["POST /v1/campaigns"]
    assert _error_ref(operation, "422") == ERROR_REF
    assert _error_ref(operation, "429") == ERROR_REF
    assert "HTTPValidationError" not in str(api_app.openapi()["components"]["schemas"])


async def test_a_body_that_is_not_json_is_a_400_json_error(api: httpx.AsyncClient) -> None:
    # found by schemathesis: bytes that are not JSON were answered as an undocumented 400 with
    # the code "http_error"
    response = await api.post("/v1/devices", content=b"\xff\x37\xfe5;",
                              headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert error_code(response) == "malformed_body"
