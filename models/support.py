"""Small builders for the registry's per-SM status entries (shared by the family modules)."""


def status(state, why="", missing=(), how=()):
    """One (format, SM) cell: state is a key of registry.STATUSES; why is the reason for anything
    short of "verified"; missing names what has no sm8x implementation (for "wip"); how lists the
    checks this project runs for it."""
    cell = {"status": state, "why": why, "how": list(how)}
    if missing:
        cell["missing"] = list(missing)
    return cell


def same_on(sms, cell):
    """The same cell on every SM of sms."""
    return {sm: dict(cell) for sm in sms}
