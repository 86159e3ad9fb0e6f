"""The smallest run files that show each steady-state and dosing convention of
docs/conventions.md, through `pkscan run`,
against closed forms (one compartment, elimination k, or the Bateman function). The generated
cases cover the same ground in combination; these say in one line what is expected."""

import math
import os
import subprocess

import numpy as np
import pytest

ONE_COMPARTMENT = """model:
  linear:
    compartments: [central]
    eliminations:
      - {from: central, rate: k}
subjects:
  dataset: data.csv
  parameters: {k: 0.2, lag_central: LAG}
output:
  path: out.csv
"""


def run(tmp_path, yaml_text, dataset=None, column="amount_central"):
    """`pkscan run` in tmp_path; the values of one output column."""
    (tmp_path / "run.yaml").write_text(yaml_text)
    if dataset is not None:
        (tmp_path / "data.csv").write_text(dataset)
    p = subprocess.run([os.environ["PKSCAN_CLI"], "run", "run.yaml", "--quiet"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    lines = (tmp_path / "out.csv").read_text().splitlines()
    j = lines[0].split(",").index(column)
    return np.array([float(ln.split(",")[j]) for ln in lines[1:]])


def test_two_parameter_lists_give_each_subject_its_own_values(tmp_path):
    """ka and ke both per-subject lists: subject s follows the Bateman function of its own ka
    and ke."""
    ka, ke, dose = [1.2, 0.7], [0.1, 0.3], 100.0
    central = run(tmp_path, f"""model: two_compartment
time: {{dt: 0.5, steps: 8}}
subjects:
  parameters: {{ka: {ka}, ke: {ke}, v_central: 10}}
doses:
  - {{compartment: depot, time: 0, amount: {dose}}}
output: {{path: out.csv}}
""")
    t = np.arange(9) * 0.5
    expected = np.concatenate([dose * a / (a - e) * (np.exp(-e * t) - np.exp(-a * t))
                               for a, e in zip(ka, ke)])
    np.testing.assert_allclose(central, expected, rtol=0, atol=1e-9 * dose)


@pytest.mark.parametrize("lag", [2.0, 10.0])
def test_lagged_steady_state_dose_holds_the_periodic_state_from_the_record_time(tmp_path, lag):
    """SS=1 bolus of 100 every 8 at t0 = 4 with lag L. L = 2 < II: doses arrive at t0 + L - 8 k;
    from t0 on the state is the periodic one, peak exp(-k (time since the last arrival)),
    peak = 100 / (1 - exp(-8 k)), with the record's own dose arriving at 6. L = 10 >= II:
    NONMEM's advance II - ALAG is not positive, so the state at t0 is the peak and decays until
    the record's own dose arrives at 14."""
    k, ii = 0.2, 8.0
    out = run(tmp_path, ONE_COMPARTMENT.replace("LAG", str(lag)),
              "ID,TIME,AMT,II,SS,EVID\n1,4,100,8,1,1\n1,4,.,.,.,0\n1,5,.,.,.,0\n1,7,.,.,.,0\n")
    peak = 100 / (1 - math.exp(-k * ii))
    if lag < ii:
        last_arrival = 4 + lag - ii                             # the latest arrival <= 4
        expected = [peak * math.exp(-k * (t - last_arrival)) for t in (4.0, 5.0)]
        expected.append(peak * math.exp(-k * 1.0))            # the record's dose arrived at 6
    else:
        expected = [peak * math.exp(-k * (t - 4.0)) for t in (4.0, 5.0, 7.0)]
    np.testing.assert_allclose(out, expected, rtol=1e-9)


def test_steady_state_constant_infusion_stops_at_the_record(tmp_path):
    """AMT 0, RATE 5, II 0, SS=1 at t = 2: the equilibrium R / k at 2, then free decay."""
    out = run(tmp_path, ONE_COMPARTMENT.replace("LAG", "0"),
              "ID,TIME,AMT,RATE,II,SS,EVID\n1,2,0,5,0,1,1\n1,2,.,.,.,.,0\n1,7,.,.,.,.,0\n")
    np.testing.assert_allclose(out, [5 / 0.2, 5 / 0.2 * math.exp(-0.2 * 5)], rtol=1e-9)


def test_steady_state_uses_the_ss_records_own_parameters(tmp_path):
    """An observation with K = 0.1 and an SS=1 bolus record with K = 0.3 at the same time: the
    steady state is that of K = 0.3 (the record's own values), 100 / (1 - exp(-0.3 * 6))."""
    out = run(tmp_path, ONE_COMPARTMENT.replace("LAG", "0"),
              "ID,TIME,AMT,II,SS,EVID,K\n1,3,.,.,.,0,0.1\n1,3,100,6,1,1,0.3\n"
              "1,3,.,.,.,0,0.3\n")
    np.testing.assert_allclose(out, [0.0, 100 / (1 - math.exp(-0.3 * 6))], rtol=1e-9)
