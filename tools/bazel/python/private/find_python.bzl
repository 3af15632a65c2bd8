"""The machine's Python at the pinned version, for repository rules that run Python."""

def find_pinned_python(ctx, pins_label):
    """The machine's Python whose major.minor equals the pin, or a clear failure."""
    pins = json.decode(ctx.read(pins_label))
    want = pins["python"]["version"]
    for candidate in ["python" + want, "python3"]:
        path = ctx.which(candidate)
        if not path:
            continue
        got = ctx.execute([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
        if got == want:
            return path
    fail("Python %s is pinned in %s but neither python%s nor python3 on PATH is %s; install it (apt-get install python%s-venv) or enter `nix develop`." % (want, pins_label, want, want, want))
