"""Seeds from a JAX PRNG key."""

import jax
import jax.numpy as jnp


def seeds_from_key(key, batch: int) -> jax.Array:
    """[batch, 2] uint32 (low, high) words of 64-bit seeds drawn from a JAX PRNG key (a typed key
    from jax.random.key, or a legacy uint32 [2] key from jax.random.PRNGKey); every op takes them as
    `seeds`. Split the key as usual to get new seeds: equal keys give equal seeds, so equal tokens.

    Example:
        >>> seeds = jsample.seeds_from_key(jax.random.key(0), 4)
        >>> tokens = jsample.gumbel_sample(logits, seeds, positions, 0.7)
    """
    return jax.random.bits(key, (batch, 2), jnp.uint32)
