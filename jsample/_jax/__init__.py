"""The JAX frontend (the only package that imports jax)."""
