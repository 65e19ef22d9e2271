from otter.test_files import test_case

OK_FORMAT = False

name = "anatomy_q1b"
points = 1

@test_case(points=None, hidden=False)
def test_q1b_is_a_run_under_a_two_turn_budget(result_q1, effects_q1):
    """result_q1 is what run_agent returned, for a run allowed at most two model calls."""
    from agentbook import RunResult
    assert result_q1 is not ..., 'not answered yet: replace the ... with your call to run_agent'
    assert isinstance(result_q1, RunResult), f'expected result_q1 to be the RunResult run_agent returns; found {type(result_q1)}'
    assert isinstance(effects_q1, list), f"expected effects_q1 to be the desk's effect log, a list; found {type(effects_q1)}"
    assert result_q1.state.turns <= 2, f'expected at most 2 model calls under Limits(max_turns=2); found {result_q1.state.turns}: pass the limits to run_agent'

@test_case(points=None, hidden=False)
def test_q1b_effects_q1_is_this_runs_desk(result_q1, effects_q1):
    """Every receipt in effects_q1 was produced by this run: the run used that desk."""
    assert result_q1 is not ..., 'not answered yet: replace the ... with your call to run_agent'
    produced = [observation.content for observation in result_q1.state.observations]
    strays = list(effects_q1)
    for item in produced:
        if item in strays:
            strays.remove(item)
    assert not strays, f"expected effects_q1 to hold only this run's receipts; found {strays} from another run: give run_agent tools_q1, the desk whose effect log is effects_q1"

