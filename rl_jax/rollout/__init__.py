"""The host side of a rollout (DESIGN.md §7): planner -> engine -> round rules -> batch."""
