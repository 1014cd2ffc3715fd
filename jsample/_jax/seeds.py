"""Seeds from a JAX PRNG key."""

import jax
import jax.numpy as jnp


def seeds_from_key(key, batch: int) -> jax.Array:
    """[batch, 2] uint32 (low, high) words of 64-bit seeds drawn from a JAX PRNG key (a typed key
    from jax.random.key, or a legacy uint32 [2] key from jax.random.PRNGKey); every op takes them as
    `seeds`. Split the key as usual to get new seeds: equal keys give equal seeds, so equal tokens.

    Example:
        >>> import jax, jax.numpy as jnp, jsample
        >>> seeds = jsample.seeds_from_key(jax.random.key(0), 2)
        >>> seeds.shape, str(seeds.dtype)
        ((2, 2), 'uint32')
        >>> jsample.gumbel_sample(jnp.zeros((2, 5), jnp.float32), seeds, jnp.array([0, 0]), 0.7).shape
        (2,)
    """
    return jax.random.bits(key, (batch, 2), jnp.uint32)
