from otter.test_files import test_case

OK_FORMAT = False

name = "untrusted_q4a"
points = 2

@test_case(points=None, hidden=False)
def test_q4a_the_program_really_overwrites_the_file(escape_code):
    """Run by a plain Python, outside the sandbox, the program overwrites the file."""
    import os
    import subprocess
    import sys
    import tempfile
    assert escape_code is not ..., 'not answered yet: write escape_code'
    target = os.path.join(tempfile.mkdtemp(), 'target.txt')
    with open(target, 'w', encoding='utf-8') as file:
        file.write('original')
    code = escape_code(target)
    assert code is not None, 'not answered yet: escape_code returns None'
    subprocess.run([sys.executable, '-c', code], cwd=tempfile.mkdtemp(), timeout=30)
    with open(target, encoding='utf-8') as file:
        found = file.read()
    assert found == 'escaped', f"expected the program, run outside the sandbox, to leave 'escaped' in the file; found {found!r}"

@test_case(points=None, hidden=False)
def test_q4a_the_sandbox_refuses_it(escape_code):
    """Run in the sandbox, the same program fails and the file is unchanged."""
    import os
    import tempfile
    from agentbook import SandboxLimits, run_sandboxed
    target = os.path.join(tempfile.mkdtemp(), 'target.txt')
    with open(target, 'w', encoding='utf-8') as file:
        file.write('original')
    code = escape_code(target)
    assert code is not None, 'not answered yet: escape_code returns None'
    seen = run_sandboxed(code, SandboxLimits())
    with open(target, encoding='utf-8') as file:
        found = file.read()
    assert found == 'original', f'expected the sandbox to keep the file unchanged; found {found!r}'
    assert seen['status'] == 'failed' and 'sandbox' in seen['output'], f'expected the sandbox to refuse the program; found {seen}'

