"""Agent Skills for Stockade: loading, the skill tool and the double-safety gate."""
