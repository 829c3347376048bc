"""The host and the fabric as netbench finds them: the host's fingerprint (probe), the PCIe
path to a device (linkpath), a soft-RoCE device made for a run (softroce), the launcher it
runs under (launch), how busy the host is while a case runs (hostload), and the fabric's
shape (topology). First in the pipeline: imports no later stage.
"""
