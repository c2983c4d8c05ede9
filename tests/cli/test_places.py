"""Where findings are placed (specs/deciding/report.md REP-10 .. REP-12), without running a kernel: the table that
picks the line to change, the search for the `collective_id=` line, and the SARIF rules."""

from __future__ import annotations

import types
from urllib.parse import urlparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.frontend.collective_id_site import collective_id_loc
from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.sites import ROLES, collective_id_site, site
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.report.places import PRIMARY, places
from semcheck.model.ops import Loc


def _verdict(prop: str, found: list[dict], locs=()) -> Verdict:
    return Verdict(prop, "violated", witness=Witness("m", locs=tuple(locs), details={"sites": found}))


@pytest.mark.rule("REP-10")
@settings(max_examples=60, deadline=None, derandomize=True)
@given(prop=st.sampled_from(sorted(PRIMARY)),
       roles=st.lists(st.sampled_from(ROLES), min_size=1, max_size=6),
       data=st.data())
def test_the_table_picks_the_role_of_the_fix(prop, roles, data):
    """Whatever order a builder lists its sites in, the primary is the site of the most preferred role the
    table names for the property (else the builder's first); every other line is related, once, with its
    message."""
    found = [site(r, Loc("/k.py", 10 + i, f"op{i}"), f"note {i}") for i, r in enumerate(roles)]
    found = data.draw(st.permutations(found))
    at = places(_verdict(prop, found))
    preferred = [s for role in PRIMARY[prop] for s in found if s["role"] == role]
    expected = preferred[0] if preferred else found[0]
    assert (at.primary.loc.line, at.primary.role, at.primary.message) == (expected["line"], expected["role"],
                                                                           expected["note"])
    lines = [p.loc.line for p in at.related]
    assert sorted(lines) == sorted(s["line"] for s in found if s is not expected)
    assert all(p.message for p in at.related)


@pytest.mark.rule("REP-10")
def test_a_witness_without_sites_keeps_its_first_line_and_an_override_wins():
    a, b = Loc("/k.py", 3, "x = 1"), Loc("/k.py", 7, "y = 2")
    at = places(_verdict("exit-balance", [], locs=(None, a, b, a)))
    assert at.primary.loc == a and [p.loc for p in at.related] == [b]
    assert at.primary.message == "m"  # the witness's own sentence
    assert at.related[0].message == "involved: `y = 2`"
    # the divergence line of a finding some DMA mode proves comes first; the witness's choice is related
    from semcheck.checker.report.places import Place

    wrong = site("wrong-wait", b, "waits on sems[1]")
    at = places(_verdict("race-free", [wrong]), Place(a, "D1: ...", "divergence"))
    assert at.primary.loc == a and [(p.loc.line, p.role) for p in at.related] == [(7, "wrong-wait")]


@pytest.mark.rule("REP-11")
def test_the_collective_id_line_is_found_alone_or_not_at_all(tmp_path):
    """The `collective_id=` keyword of the kernel's scope, innermost first; two candidates in one scope, or a
    literal that is not the traced id, give no line rather than a guess."""
    def found(source: str, cid: int, at: int):
        path = tmp_path / f"k{abs(hash(source))}.py"
        path.write_text(source)
        eqn = types.SimpleNamespace(source_info=None)  # as under shard_map(call): no user frame
        loc = collective_id_loc(eqn, types.SimpleNamespace(collective_id=cid), Loc(str(path), at))
        return None if loc is None else loc.line

    one = ("def _kernel(x):\n    pass\n\n"
           "def build(n, cid=7):\n    params = CompilerParams(\n        collective_id=cid)\n")
    assert found(one, 7, 1) == 6
    two = one + "\ndef other(cid):\n    return CompilerParams(collective_id=cid)\n"
    assert found(two, 7, 1) is None  # two calls' ids in the module: which one is not known
    literals = ("def _kernel(x):\n    pass\n\n"
                "A = CompilerParams(collective_id=3)\nB = CompilerParams(collective_id=2000)\n")
    assert found(literals, 2000, 1) == 5 and found(literals, 9, 1) is None
    nested = ("def build(n):\n    def _kernel(x):\n        p = dict(collective_id=4)\n"
              "    q = {'collective_id': 5}\n")
    assert found(nested, 4, 2) == 3  # the kernel's own function first
    assert found(nested, 5, 1) == 4
    assert collective_id_loc(types.SimpleNamespace(source_info=None), types.SimpleNamespace(collective_id=None),
                             Loc(str(tmp_path / "none.py"), 1)) is None


@pytest.mark.rule("REP-11")
def test_an_id_collision_is_placed_at_the_collective_id_argument():
    g, a, c = Loc("/k.py", 47, "get_barrier_semaphore()"), Loc("/k.py", 42, "def _kernel"), Loc("/k.py", 70, "cid")
    v = _verdict("id-disjoint", [site("barrier", g, "fetches"), site("allocation", a, "handed")])
    v = dataclasses_replace_details(v, collective_id=2000)
    assert places(v).primary.loc == g  # without the front end's line: get_barrier_semaphore
    at = places(collective_id_site(v, c))
    assert at.primary.loc == c and "collective_id 2000" in at.primary.message
    assert [p.loc.line for p in at.related] == [47, 42]
    other = _verdict("deadlock-free", [site("blocked-wait", g, "blocks")])
    assert collective_id_site(other, c) is other  # only an id collision is about the id


def dataclasses_replace_details(v: Verdict, **more) -> Verdict:
    import dataclasses

    return dataclasses.replace(v, witness=dataclasses.replace(v.witness, details={**v.witness.details, **more}))


@pytest.mark.rule("REP-12")
def test_every_sarif_rule_is_complete():
    from semcheck.checker.report.render import to_sarif

    driver = to_sarif("k.py", [], "0")["runs"][0]["tool"]["driver"]
    uri = urlparse(driver["informationUri"])
    assert uri.scheme == "https" and uri.netloc
    assert [r["id"] for r in driver["rules"]] == [*IDS, "unknown", "input-error", "unrunnable", "vacuous", "unused-suppression"]
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"], rule["id"]
        assert len(rule["fullDescription"]["text"]) > len(rule["shortDescription"]["text"]), rule["id"]
        assert rule["help"]["text"] and rule["help"]["markdown"].startswith("**"), rule["id"]
        assert "Typical fix:" in rule["help"]["text"], rule["id"]
        assert urlparse(rule["helpUri"]).scheme == "https", rule["id"]
