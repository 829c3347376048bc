"""Fabric-wide sweeps: one rank per host (or NIC) under a launcher (fabric), the rounds of
pairs (schedule), the builtin rendezvous (kvstore), and a flow-level simulator of a fabric
(simulate) that the analysis is tested against at scales no test machine has.
"""
