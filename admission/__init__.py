"""Berth's imperative shell: webhook, controller, policy, backends, agent and the ``berth`` CLI."""
