"""Serving math: how a GPU serves a load (Poisson-server concurrency solve).

``solve``: the Little's-law concurrency of Poisson-server rows, bracketed on the capacity grid and
finished by Illinois (regula falsi) steps: arrays in, arrays out; one row of floats is the same steps.
"""
