"""End-to-end fixtures: every service a separate process, started the way `make up` starts them,
each test with its own database, vhost, Redis namespace and ports; one nx-27017 per session.

Starting a stack costs about 10 s on 2 cores (five Python processes importing their libraries,
then stopping them). The tests that run the default fleet (api, dispatcher, two senders)
share one for the whole session instead (``shared_stack``): each of their tests gets it put back
as it was (``Fleet.heal``: what a test killed is restarted, what it added is stopped) and works on
devices of its own (``Fleet.import_own``), so tests never see each other's campaigns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.broker_users import BrokerUsers, delete_users, import_definitions, user_definitions
from devstack.isolation import VhostPool, private_stack, unique_name
from devstack.processes import free_port
from devstack.stack import Stack, StackConfig
from fcm_emulator.client import EmulatorClient
from tests.e2e.fleet import Fleet
from tests.e2e.harness import Api, assert_bodies_conform

EXCLUSIVE = frozenset({
    "test_lanes", "test_forecast", "test_many_campaigns", "test_pipe", "test_prefetch",
    "test_rate_change", "test_cancel", "test_pause", "test_inputs", "test_resilience"})
"""Modules that measure deadlines under a second, rates or shares of the fleet, or stop the
machine's RabbitMQ and Redis (test_resilience): ``make test`` runs them alone, after the other
modules ran two at a time (``-m "not exclusive"`` with ``-n 2``). Each xdist worker has its own
nx-27017, fleet and vhosts (session fixtures), so the others share nothing but RabbitMQ and
Redis. Deadlines of a second or more (a schedule fired and started within 1 s, a revoked key
refused within 1 s) hold with two modules at a time; a pause's 400 ms did not (402 ms in a run
of 2026-11-27)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).stem in EXCLUSIVE:
            item.add_marker(pytest.mark.exclusive)


E2E_ENV = {"HERALD_HEARTBEAT_INTERVAL_S": "0.5", "HERALD_SWEEP_INTERVAL_S": "0.25",
           "HERALD_LEASE_S": "3", "HERALD_GRACE_PERIOD_S": "10"}
"""Short heartbeats, sweeps and leases, so that failures are noticed within the tests' waits."""


@pytest.fixture(scope="session")
def mongodb_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    run_dir: Path = tmp_path_factory.mktemp("e2e-mongodb")
    stack = Stack(StackConfig(run_dir=run_dir, mongodb_port=free_port()))
    stack.start_mongodb()
    yield stack
    stack.stop(timeout_s=10)


@pytest.fixture(scope="session")
def mongodb_port(mongodb_stack: Stack) -> int:
    return mongodb_stack.config.mongodb_port


@pytest.fixture
def mongodb_restarter(mongodb_stack: Stack) -> Callable[[Callable[[], object]], None]:
    """Stop the MongoDB server, run a check while it is down, start it again on its files."""
    def restart(while_down: Callable[[], object]) -> None:
        assert mongodb_stack.processes["mongodb"].terminate(timeout_s=10) is not None
        try:
            while_down()
        finally:
            mongodb_stack.start_mongodb()
    return restart


@pytest.fixture
def mongodb_killer(mongodb_stack: Stack) -> Callable[[Callable[[], object]], None]:
    """kill -9 the MongoDB server, run ``while_down``, start it again on its files."""
    def kill(while_down: Callable[[], object]) -> None:
        mongodb_stack.processes["mongodb"].kill()
        try:
            while_down()
        finally:
            mongodb_stack.start_mongodb()
    return kill


@pytest.fixture(scope="session")
def stack_brokers() -> Iterator[VhostPool]:
    """Vhosts for the session's stacks, with one pair of broker users (made once)."""
    users = BrokerUsers.new(unique_name("herald_e2e"))
    import_definitions(user_definitions(users))
    pool = VhostPool(users, prefix="herald_e2e")
    yield pool
    pool.close()
    delete_users(users)


@pytest.fixture
def stack(mongodb_port: int, tmp_path: Path, stack_brokers: VhostPool) -> Iterator[Stack]:
    """A private stack on the session's MongoDB server; the test starts what it needs."""
    with private_stack(tmp_path, mongodb_port=mongodb_port, pool=stack_brokers,
                       extra_env=dict(E2E_ENV)) as running:
        yield running
        if "fcm-emulator" in running.processes and running.processes["fcm-emulator"].alive():
            assert_bodies_conform(running.config.fcm_url)


@pytest.fixture(scope="module")
def module_stack(mongodb_port: int, tmp_path_factory: pytest.TempPathFactory,
                 stack_brokers: VhostPool) -> Iterator[Stack]:
    """``stack`` shared by the tests of one module (the console's browser tests): they use
    separate campaigns and keys, so one stack serves them all."""
    with private_stack(tmp_path_factory.mktemp("module-stack"), mongodb_port=mongodb_port,
                       pool=stack_brokers, extra_env=dict(E2E_ENV)) as running:
        yield running
        if "fcm-emulator" in running.processes and running.processes["fcm-emulator"].alive():
            assert_bodies_conform(running.config.fcm_url)


@pytest.fixture
def api(stack: Stack) -> Iterator[Api]:
    client = Api(stack.config.api_url, stack.config.api_key)
    yield client
    client.http.close()


@pytest.fixture
def emulator(stack: Stack) -> Iterator[EmulatorClient]:
    client = EmulatorClient(stack.config.fcm_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def fleet(mongodb_port: int, tmp_path_factory: pytest.TempPathFactory,
          stack_brokers: VhostPool) -> Iterator[Fleet]:
    """One fleet for every module that runs the default one (see ``Fleet``)."""
    with private_stack(tmp_path_factory.mktemp("fleet"), mongodb_port=mongodb_port,
                       pool=stack_brokers, extra_env=dict(E2E_ENV)) as running:
        yield Fleet(running, senders=2)
        assert_bodies_conform(running.config.fcm_url)


@pytest.fixture
def shared_stack(fleet: Fleet) -> Stack:
    """The module's fleet, whole again, for one test (see ``Fleet``)."""
    fleet.heal()
    return fleet.stack
