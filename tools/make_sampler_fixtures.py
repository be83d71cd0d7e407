#!/usr/bin/env python3
"""Expected sampler permutations from an implementation independent of tandem's C++.

tandem's epoch permutation (src/tandem/data/sampler.cpp) is a Fisher-Yates shuffle driven by
std::mt19937_64 seeded with splitmix64(splitmix64(seed) ^ epoch), each swap index drawn by
rejection (accept r >= (2^64 - bound) mod bound, take r mod bound). This file implements the
same definition in plain Python (mt19937_64 as the C++ standard specifies it, checked against
the standard's required 10000th output) and writes the expected values to
tests/fixtures/sampler/permutations.json, which tests/test_sampler.cpp reads.

    python3 tools/make_sampler_fixtures.py    (no dependencies; the output is committed)
"""
import json
import os

MASK = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64: w=64, n=312, m=156, r=31, the standard's constants."""

    def __init__(self, seed):
        self.state = [0] * 312
        self.state[0] = seed & MASK
        for i in range(1, 312):
            previous = self.state[i - 1]
            self.state[i] = (6364136223846793005 * (previous ^ (previous >> 62)) + i) & MASK
        self.index = 312

    def _twist(self):
        for i in range(312):
            x = (self.state[i] & 0xFFFFFFFF80000000) | (self.state[(i + 1) % 312] & 0x7FFFFFFF)
            shifted = x >> 1
            if x & 1:
                shifted ^= 0xB5026F5AA96619E9
            self.state[i] = self.state[(i + 156) % 312] ^ shifted
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.state[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def splitmix64(value):
    value = (value + 0x9E3779B97F4A7C15) & MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK
    return value ^ (value >> 31)


def uniform_below(engine, bound):
    threshold = ((1 << 64) - bound) % bound
    while True:
        r = engine()
        if r >= threshold:
            return r % bound


def epoch_permutation(size, seed, epoch):
    permutation = list(range(size))
    engine = MT19937_64(splitmix64(splitmix64(seed) ^ epoch))
    for i in range(size - 1, 0, -1):
        j = uniform_below(engine, i + 1)
        permutation[i], permutation[j] = permutation[j], permutation[i]
    return permutation


def main():
    engine = MT19937_64(5489)  # the standard: the 10000th output of a default-constructed engine
    for _ in range(9999):
        engine()
    assert engine() == 9981545732273789042, "mt19937_64 does not meet the C++ standard"
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    cases = [(10, 42, 0), (10, 42, 1), (10, 0, 0), (10, MASK, 3), (1000, 7, 2), (257, 1234, 5)]
    fixture = {
        "splitmix64": {str(v): str(splitmix64(v)) for v in (0, 42)},
        "permutations": [
            {"size": size, "seed": str(seed), "epoch": epoch,
             "permutation": epoch_permutation(size, seed, epoch)}
            for size, seed, epoch in cases
        ],
    }
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tests", "fixtures", "sampler", "permutations.json")
    with open(path, "w") as out:
        json.dump(fixture, out, indent=1)
        out.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
