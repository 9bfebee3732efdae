"""The dry run's time estimates (dpsd/sweep/timing.py)."""


def test_a_dry_run_also_prices_the_cells_on_each_gpu_class_of_hardware_recorded():
    from dpsd.sweep.timing import Timing, gpu_classes

    def timed(hardware: str, n: int) -> list[Timing]:
        return [Timing(f"{hardware}{i}", "h", "s", "dpsd", "paper", hardware, 1.0) for i in range(n)]

    here = "AMD EPYC, 2 logical cores, no GPU"
    timings = [*timed(here, 5), *timed("Xeon, 16 logical cores, NVIDIA H200", 2), *timed("Xeon, 8 logical cores, NVIDIA A100", 3)]
    assert gpu_classes(timings, here) == ["Xeon, 8 logical cores, NVIDIA A100", "Xeon, 16 logical cores, NVIDIA H200"]
    assert gpu_classes(timings, "Xeon, 8 logical cores, NVIDIA A100") == ["Xeon, 16 logical cores, NVIDIA H200"]
    assert gpu_classes(timed(here, 2), here) == []
