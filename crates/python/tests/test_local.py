"""What needs no job: the package's pieces a program sees before it joins."""

import bulkwire


def test_operations():
    assert bulkwire.SUM(2, 3) == 5 and bulkwire.PROD(2, 3) == 6
    assert bulkwire.MIN(2, 3) == 2 and bulkwire.MAX(2, 3) == 3
    assert repr(bulkwire.IN_PLACE) == "bulkwire.IN_PLACE"


def test_status_defaults_to_any():
    st = bulkwire.Status()
    assert (st.Get_source(), st.Get_tag(), st.Get_count()) == (bulkwire.ANY_SOURCE, bulkwire.ANY_TAG, 0)


def test_joining_outside_a_job_is_a_clear_error():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import bulkwire; bulkwire.World()"], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode != 0
    assert "bulkwire.Error" in done.stderr or "Error" in done.stderr, done.stderr
    assert "BULKWIRE" in done.stderr or "bulkwire run" in done.stderr, done.stderr
