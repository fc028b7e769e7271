#!/usr/bin/env python3
"""Drive a Redfish service the way Ironic/metal3 does, with the real sushy client.

Usage: sushy_power.py BASE SYSTEM_ID USER PASS [CA_BUNDLE] [--allow-basic]

  BASE         e.g. http://127.0.0.1:8000 or https://127.0.0.1:8443
  SYSTEM_ID    the Id under /redfish/v1/Systems/
  CA_BUNDLE    PEM file to verify the server certificate against; without it
               certificates are not verified (verify=False).
  --allow-basic  accept sushy falling back to HTTP Basic. Only for reference
               servers without a SessionService (sushy-tools' emulator); our
               simulator must give sushy a session.

Steps: reset On, poll until PowerState reads On; reset ForceOff, poll until
Off; check that sushy refuses, without sending anything, a bogus ResetType and
a real ResetType the service does not advertise; close the session. Prints
"SUSHY OK" and exits 0, or prints "SUSHY FAIL: <why>" and exits 1.
"""

import gc
import logging
import sys
import time

POLL_INTERVAL_S = 0.2
POLL_TIMEOUT_S = 30.0


class Failure(Exception):
    pass


def parse_args(argv):
    args = [a for a in argv if a != "--allow-basic"]
    allow_basic = len(args) != len(argv)
    if len(args) not in (4, 5):
        sys.exit(__doc__)
    base, system_id, user, password = args[:4]
    verify = args[4] if len(args) == 5 else False
    return base, system_id, user, password, verify, allow_basic


def auth_mode(root):
    """Which authentication the Sushy object ended up with: 'session' or 'basic'.

    sushy 5.x defaults to SessionOrBasicAuth: it POSTs to the Sessions
    collection and, on any error (401, 404, no X-Auth-Token...), silently falls
    back to Basic. After a fallback the SessionAuth half has no key and no
    session URI, and the requests session carries a (user, password) tuple
    instead of an X-Auth-Token header. Check all three so that a change in
    sushy's internals fails loudly instead of passing by accident.
    """
    from sushy import auth as sushy_auth

    auth = getattr(root, "_auth", None)
    if not isinstance(auth, sushy_auth.SessionAuth):
        raise Failure(f"unexpected sushy auth object {auth!r}; has sushy changed?")
    http = root._conn._session
    has_session = (
        auth.get_session_key() is not None
        and auth.get_session_resource_id() is not None
        and http.headers.get("X-Auth-Token") == auth.get_session_key()
        and http.auth is None
    )
    if has_session:
        return "session"
    if http.auth is not None and "X-Auth-Token" not in http.headers:
        return "basic"
    raise Failure(
        f"cannot tell sushy's auth mode: key={auth.get_session_key() is not None} "
        f"uri={auth.get_session_resource_id()!r} basic={http.auth is not None} "
        f"token_header={'X-Auth-Token' in http.headers}"
    )


def wait_for_power(system, want):
    start = time.monotonic()
    while True:
        system.refresh()
        if system.power_state == want:
            return time.monotonic() - start
        if time.monotonic() - start > POLL_TIMEOUT_S:
            raise Failure(
                f"PowerState is {system.power_state!r}, still not {want.value!r} "
                f"after {POLL_TIMEOUT_S:.0f} s"
            )
        time.sleep(POLL_INTERVAL_S)


def expect_refused(system, value, why):
    from sushy import exceptions

    name = getattr(value, "value", value)
    try:
        system.reset_system(value)
    except exceptions.InvalidParameterValueError:
        print(f"reset {name!r} refused by sushy ({why})")
        return
    raise Failure(f"sushy sent reset {name!r} ({why}); it should have refused it")


def run(base, system_id, user, password, verify, allow_basic):
    import sushy

    root = sushy.Sushy(base, username=user, password=password, verify=verify)
    mode = auth_mode(root)
    print(f"sushy authenticated with {mode} auth")
    if mode != "session" and not allow_basic:
        raise Failure(
            "sushy fell back to HTTP Basic: the service did not give it a session "
            "(POST to the Sessions collection must answer 201 with X-Auth-Token and Location)"
        )

    system = root.get_system(f"/redfish/v1/Systems/{system_id}")
    if system.identity != system_id:
        raise Failure(f"system Id is {system.identity!r}, expected {system_id!r}")

    for reset, want in (
        (sushy.ResetType.ON, sushy.PowerState.ON),
        (sushy.ResetType.FORCE_OFF, sushy.PowerState.OFF),
    ):
        system.reset_system(reset)
        took = wait_for_power(system, want)
        print(f"reset {reset.value}: PowerState {want.value} after {took:.1f} s")

    # sushy compares against a set of ResetType members, so any plain string
    # (even 'On') is refused; Ironic always passes the enum members.
    expect_refused(system, "Bogus", "not a ResetType")

    advertised = system.get_allowed_reset_system_values()
    unadvertised = [r for r in sushy.ResetType if r not in advertised]
    if not unadvertised:
        # sushy treats a missing AllowableValues/ActionInfo as "everything".
        raise Failure(
            f"every ResetType is allowed ({sorted(r.value for r in advertised)}): "
            "the service advertises none, or all of them"
        )
    probe = sushy.ResetType.NMI if sushy.ResetType.NMI in unadvertised else unadvertised[0]
    expect_refused(system, probe, "real ResetType, not advertised")

    # Sushy.__del__ DELETEs the session; make it happen now, while the server
    # is still up, rather than at interpreter exit. sushy only logs a warning
    # when that DELETE fails, so collect its warnings, then check that the
    # server really forgot the token.
    token = root._auth.get_session_key()
    warnings = _WarningCollector()
    logging.getLogger("sushy").addHandler(warnings)
    del system, root
    gc.collect()
    logging.getLogger("sushy").removeHandler(warnings)
    if warnings.messages:
        raise Failure("closing the session: " + "; ".join(warnings.messages))
    if mode == "session":
        import requests

        r = requests.get(
            f"{base.rstrip('/')}/redfish/v1/Systems/{system_id}",
            headers={"X-Auth-Token": token, "OData-Version": "4.0"},
            verify=verify,
            timeout=30,
        )
        if r.status_code != 401:
            raise Failure(f"the deleted session's token still works (GET system answered {r.status_code})")
        print("session deleted; its token now gets 401")


class _WarningCollector(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main(argv):
    base, system_id, user, password, verify, allow_basic = parse_args(argv)
    try:
        run(base, system_id, user, password, verify, allow_basic)
    except Failure as e:
        print(f"SUSHY FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # sushy's own errors: AccessError, ConnectionError, ...
        print(f"SUSHY FAIL: {type(e).__module__}.{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("SUSHY OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
