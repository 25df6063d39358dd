"""What a placement costs the user, in seconds: how the stock plan chooses among its alternatives.

Every alternative keeps the asked context on the devices' budget by putting something in host RAM:
whole layers (``-ngl``), the KV of some layers (``-ngl`` + ``-ot``), expert weights
(``--n-cpu-moe``) or the whole KV (``-nkvo``). Per byte of device memory freed, each costs about one
byte the host side reads per generated token, so decode alone hardly tells them apart; prefill does:
llama.cpp runs a big batch's matmuls on the GPU even for host weights (ggml-backend ``op_offload``:
the weights are copied over the bus for every ubatch), while host KV is read where it lies, by the
CPU's attention. The price of an alternative is the time of one typical chat turn:

    decode  = TURN_REPLY tokens × host bytes per token / HOST_BANDWIDTH
    prefill = ceil(TURN_PROMPT / n_ubatch) × (host weights streamed / bus bandwidth
                                              + host KV read / HOST_BANDWIDTH)

Both are memory-bound estimates (decode on a CPU reads every host byte once per token; a streamed
matmul waits for its weights), not measurements: ``bench/placement.py`` measures the alternatives on
this machine and prints the predicted price beside each.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Host memory bandwidth a CPU reaches reading model data: dual-channel DDR5-5600 is 89.6 GB/s on
#: paper, STREAM-like reads reach about two thirds of that.
HOST_BANDWIDTH = 60e9
#: PCIe bandwidth per lane and direction by generation (GB/s after encoding: 8b/10b to gen 2,
#: 128b/130b from gen 3), times about 0.8 reached by large copies.
PCIE_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
BUS_EFFICIENCY = 0.8
#: A bus NVML does not describe (a simulated card, an RPC worker): PCIe 4.0 x16.
DEFAULT_BUS = PCIE_LANE[4] * 16 * BUS_EFFICIENCY
#: One typical turn: a 2048-token prompt (a conversation so far, or a document) and a 256-token reply.
TURN_PROMPT = 2048
TURN_REPLY = 256


def bus_bandwidth(pcie_gen: int | None, pcie_width: int | None) -> float:
    """Bytes per second to a GPU over its link (NVML's generation and width), else DEFAULT_BUS."""
    if not pcie_gen or not pcie_width or pcie_gen not in PCIE_LANE:
        return DEFAULT_BUS
    return PCIE_LANE[pcie_gen] * pcie_width * BUS_EFFICIENCY


@dataclass(frozen=True)
class TurnCost:
    """Seconds one typical turn spends on the host side of a placement."""

    decode_s: float
    prefill_s: float

    @property
    def total_s(self) -> float:
        return self.decode_s + self.prefill_s


def turn_cost(host_bytes_per_token: int, streamed_per_ubatch: int, host_kv: int, n_ubatch: int,
              bus: float = DEFAULT_BUS) -> TurnCost:
    """The price of a placement: ``host_bytes_per_token`` (host weights a token reads and host KV),
    ``streamed_per_ubatch`` (host layer weights a prefill ubatch copies to the GPU), ``host_kv``
    (KV in host RAM, read by CPU attention once per ubatch)."""
    ubatches = -(-TURN_PROMPT // max(1, n_ubatch))
    decode = TURN_REPLY * host_bytes_per_token / HOST_BANDWIDTH
    prefill = ubatches * (streamed_per_ubatch / bus + host_kv / HOST_BANDWIDTH)
    return TurnCost(decode, prefill)
