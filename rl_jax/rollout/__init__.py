"""The host side of a rollout (docs/design.md §7): planner -> engine -> round rules -> batch."""
