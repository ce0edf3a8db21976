"""A host-bound loop with known places, for recording host stacks without a GPU.

The main thread repeats: `build_tree` (pure-Python work, about 3 ms) then `wait_for_device`
(a 2 ms sleep, standing in for a synchronisation); a second thread, `tokenizer`, does
pure-Python work in `tokenize` the whole time. The recording under
`examples/host-stacks/` was made with `cufall probe-host-stacks`.
"""
import argparse
import threading
import time


def build_tree(depth):
    # Pure-Python work the sampler sees as running with the GIL held.
    nodes = []
    for i in range(depth):
        nodes.append({"id": i, "children": [i * 2, i * 2 + 1]})
    return len(nodes)


def wait_for_device(seconds):
    # A blocking wait: the sampler sees the thread idle.
    time.sleep(seconds)


def tokenize(stop):
    while not stop.is_set():
        words = "the quick brown fox jumps over the lazy dog".split()
        _ = [w[::-1] for w in words * 50]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    stop = threading.Event()
    worker = threading.Thread(target=tokenize, args=(stop,), name="tokenizer")
    worker.start()
    for _ in range(args.steps):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.003:
            build_tree(200)
        wait_for_device(0.002)
    stop.set()
    worker.join()


if __name__ == "__main__":
    main()
