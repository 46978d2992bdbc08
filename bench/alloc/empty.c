// Intentionally empty.
