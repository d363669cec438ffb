"""The names eve's workflows are registered under in the world (stored in every run's info)."""

SESSION_WORKFLOW = "eve.session"  # one long-lived run per session
TURN_WORKFLOW = "eve.turn"  # a child run of the session's, one per turn
