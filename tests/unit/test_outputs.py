"""How outputs are compared (tracer/outputs.py): a tail the logger dropped at exit is not a
difference, and neither is the end of a run that was stopped (killed, crashed, hung): its output
is compared up to where it stopped, so a prefix is not a distinct output."""
from types import SimpleNamespace

from ggml_trace.tracer.outputs import Cut, group_outputs, output_of, same_output

FULL = b"the of and the the of and to a in is it you that he was\n"


def test_a_cut_tail_is_not_a_divergence():
    assert same_output(FULL, FULL[:-5]) and same_output(FULL[:-3], FULL)
    assert not same_output(FULL, FULL[:-12])  # more than a tail: not comparable as the same
    assert not same_output(FULL, b"")
    assert same_output(b"", b"")
    assert not same_output(FULL, FULL.replace(b"of", b"in"))


def test_a_stopped_run_is_compared_up_to_where_it_stopped():
    assert same_output(Cut(FULL[:20]), FULL) and same_output(FULL, Cut(FULL[:20]))
    assert same_output(Cut(FULL[:20]), Cut(FULL[:41]))  # two runs killed at different moments
    assert same_output(Cut(b""), FULL)  # stopped before it printed anything: nothing differs
    # what a stopped run did print is compared byte for byte
    assert not same_output(Cut(FULL[:20].replace(b"of", b"in")), FULL)
    # the run that ended by itself is the whole of its output: a longer stopped one differs
    assert not same_output(FULL[:20], Cut(FULL))


def test_a_prefix_is_not_a_distinct_output():
    a, b = Cut(FULL[:20]), Cut(FULL[:41])
    other = FULL.replace(b"was", b"is")
    assert group_outputs([a, b]) == [0, 0]
    assert group_outputs([a, FULL, other, b]) == [0, 0, 1, 0]
    # the prefix joins the first group; the two outputs it could be the start of stay apart
    assert group_outputs([a, FULL, other]) == [0, 0, 1]
    assert group_outputs([FULL, other, a]) == [0, 1, 0]
    assert group_outputs([FULL[:20], FULL]) == [0, 1]  # not stopped: more than a tail missing


def test_how_a_run_ended_decides_how_its_output_is_compared(tmp_path):
    (tmp_path / "r.stdout").write_bytes(FULL[:20])

    def run(returncode, exit, timed_out=False):
        return SimpleNamespace(stdout="r.stdout", returncode=returncode, exit=exit, timed_out=timed_out,
                               failed=returncode != 0 or timed_out)

    killed, hung = output_of(tmp_path, run(-9, "killed by SIGKILL")), output_of(tmp_path, run(0, "hung", True))
    assert isinstance(killed, Cut) and isinstance(hung, Cut) and same_output(killed, FULL)
    exited = output_of(tmp_path, run(1, "exit status 1"))  # it ended by itself, with an error
    assert not isinstance(exited, Cut) and exited.endswith(b"[exit status 1]") and not same_output(exited, FULL)
    assert output_of(tmp_path, run(0, "exit status 0")) == FULL[:20]
