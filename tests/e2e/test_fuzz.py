"""Property-based fuzzing of the whole api from its own OpenAPI document (schemathesis), against
a real api process (uvicorn) on a real pod: as an admin and as a viewer, every operation, every
response must be a non-5xx that matches what the document declares (status, content type,
headers, body schema)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from devstack.isolation import VhostPool, private_stack
from devstack.stack import Stack
from tests.e2e.harness import Api

MAX_EXAMPLES = 6
"""Per operation and role: the whole run (2 roles x every operation) stays within ~60 s."""
# Not checked: that every request the schema allows is accepted. Some rules cannot be said in
# JSON Schema (an IANA time zone, a cron expression, FCM's camelCase data keys); the api answers
# them with a documented 422, which is what this test holds it to.

# A device import's body is NDJSON text (one device per line; the schema says a string): sent
# as schemathesis sends text/plain.
schemathesis.serializer.alias("application/x-ndjson", "text/plain")

# Destructive operations (revoking keys, ending schedules, deleting devices, erasing users) are
# fuzzed too, on this module's private stack: nothing the assertions rely on is shared with them
# (the admin key is the bootstrap key, which the fuzzer cannot name; the templates test imports
# its own device when it starts).
UNSPENDABLE_BUDGETS = {
    **{f"HERALD_API_{budget}{unit}": "100000" for budget in ("", "READ_", "CANCEL_")
       for unit in ("RATE_PER_S", "BURST")},
    # schemathesis also sends invalid keys, and expects each to be a 401, never a throttle's 429
    "HERALD_API_AUTH_FAILURES_PER_MIN": "1000000", "HERALD_API_AUTH_FAILURE_BURST": "100000"}


@pytest.fixture(scope="module")
def fuzz_stack(mongodb_port: int, tmp_path_factory: pytest.TempPathFactory,
               stack_brokers: VhostPool) -> Iterator[Stack]:
    """One api for the whole module, with request budgets the fuzzer cannot spend."""
    with private_stack(tmp_path_factory.mktemp("fuzz"), mongodb_port=mongodb_port,
                       pool=stack_brokers, extra_env=UNSPENDABLE_BUDGETS) as stack:
        stack.start_service("api")
        yield stack


@pytest.fixture(scope="module", params=["admin", "viewer"])
def fuzz_key(request: pytest.FixtureRequest, fuzz_stack: Stack) -> str:
    if request.param == "admin":
        return fuzz_stack.config.api_key
    admin = Api(fuzz_stack.config.api_url, fuzz_stack.config.api_key)
    try:
        return admin.mint_key("viewer", "fuzz-viewer")
    finally:
        admin.http.close()


def operations(stack: Stack) -> list[APIOperation]:
    """Every operation of the api's own OpenAPI document, fetched from the running api."""
    loaded = schemathesis.openapi.from_url(f"{stack.config.api_url}/openapi.json")
    return [result.ok() for result in loaded.get_all_operations()]


def _text_body(operation: APIOperation) -> bool:
    """Whether the operation's body is text other than JSON (the NDJSON device import)."""
    media_types = [body.media_type for body in operation.body]
    return bool(media_types) and not any(m.split("/")[-1] == "json" for m in media_types)


def fuzz(operation: APIOperation, base_url: str, key: str) -> None:
    """Valid and invalid requests to one operation; the first failing check raises."""
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE))

    excluded = [positive_data_acceptance]
    if _text_body(operation):  # a number sent as text is the same bytes as a string: no body
        excluded.append(negative_data_rejection)  # of text can break a string schema

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(case=cases)
    def run(case: Case) -> None:
        case.call_and_validate(base_url=base_url, headers={"Authorization": f"Bearer {key}"},
                               excluded_checks=excluded)
    run()


def test_every_operation_answers_as_documented(fuzz_stack: Stack, fuzz_key: str) -> None:
    failures: dict[str, str] = {}
    for operation in operations(fuzz_stack):
        try:
            fuzz(operation, fuzz_stack.config.api_url, fuzz_key)
        except (AssertionError, BaseExceptionGroup) as exc:  # every operation is tried
            failures[operation.label] = str(exc)
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())


# --- deep and long templates (issue 31) ----------------------------------------------------------
# Strings that schemathesis would not think of: placeholders nested thousands deep, chained
# thousands long, texts of many placeholders, and token soup in Jinja2's own alphabet, in every
# text a campaign carries, on every route that takes content. Not one may be a 5xx.
_DEPTH = st.integers(0, 3000)
_OPENERS = st.sampled_from("([{")
TEMPLATES = st.one_of(
    st.builds(lambda o, k: "{{ " + o * k + "platform" + {"(": ")", "[": "]", "{": "}"}[o] * k
              + " }}", _OPENERS, _DEPTH),
    st.builds(lambda o, k: "{{ " + o * k, _OPENERS, _DEPTH),
    st.builds(lambda link, k: "{{ platform" + link * k + " }}",
              st.sampled_from([" | upper", " ~ platform", ".a", " | default('x')", " + 1"]),
              _DEPTH),
    st.builds(lambda prefix, k: "{{ " + prefix * k + "platform }}",
              st.sampled_from(["not ", "-", "+", "~"]), _DEPTH),
    st.builds(lambda k: "{{ platform }}" * k, st.integers(0, 300)),
    st.builds(lambda k: '{{ locale | default("' + "y" * k + '") }}', st.integers(0, 5000)),
    st.text(alphabet='{}%#()[]|~.-+*/"\' abcdefilnotu_0123\n\\', max_size=4000),
)
FIELDS = st.sampled_from(["title", "body", "data", "translation", "translation_data"])


def _content(field: str, text: str) -> dict[str, object]:
    content: dict[str, object] = {"title": "Hi", "body": "Now",
                                  "data": {"landingUrl": "https://x.test"}}
    if field in ("title", "body"):
        content[field] = text
    elif field == "data":
        content["data"] = {"landingUrl": text}
    else:
        translated = {"title": "Hola", "body": text} if field == "translation" else {
            "title": "Hola", "body": "Ya", "data": {"landingUrl": text}}
        content["translations"] = {"es": translated}
    return content


def test_deep_and_long_templates_never_answer_5xx(fuzz_stack: Stack) -> None:
    admin = Api(fuzz_stack.config.api_url, fuzz_stack.config.api_key)
    scheduled = admin.create_campaign(name="fuzz-templates", send_at="2099-01-01T00:00:00Z")
    admin.import_devices([{"token": "tok-fuzz-templates", "platform": "android", "locale": "es"}])
    routes = {
        "create": lambda c: admin.http.post("/v1/campaigns", json=c),
        "preview": lambda c: admin.http.post("/v1/campaigns/preview", json={
            "content": c, "token": "tok-fuzz-templates"}),
        "schedule": lambda c: admin.http.post("/v1/schedules", json={
            "template": c, "cron": "0 9 * * MON", "timezone": "UTC"}),
        "patch": lambda c: admin.http.patch(f"/v1/campaigns/{scheduled}", json=c),
    }
    answered: dict[int, int] = {}

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(route=st.sampled_from(sorted(routes)), field=FIELDS, text=TEMPLATES)
    def run(route: str, field: str, text: str) -> None:
        response = routes[route](_content(field, text))
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        assert response.status_code < 500, (route, field, text[:200], response.text[:500])
        if response.status_code >= 400:
            assert response.json()["error"]["code"], response.text[:500]

    try:
        run()
    finally:
        admin.http.close()
    print(f"\ndeep and long templates, answers by status: {dict(sorted(answered.items()))}")
    assert answered.get(422, 0) > 0
