"""The seccomp filter every sandbox gets from bubblewrap (`--seccomp FD`): the kernel keyring is off limits.

Keyrings are not namespaced like the rest of a call: the session keyring is inherited from the host process (a
login's session keyring, with whatever tokens it holds, is *possessed* by every process below it, whatever its uid)
and the user keyrings belong to the sandbox's user namespace, so a key added in one call of a long-lived sandbox
was read back by the next. No text tool needs a keyring, so `add_key`, `request_key` and `keyctl` fail with EPERM
(as in Docker's default profile). The filter is a classic BPF program built here, for the machine's native
architecture and its 32-bit (and x32) compat ABI; on an architecture not listed, no filter is made and the
start-up line says the keyring is reachable.
"""

from __future__ import annotations

import errno
import fcntl
import os
import platform
import struct

# (AUDIT_ARCH_*, syscall numbers of add_key, request_key, keyctl) per machine: the native ABI, then its compat ABI
ARCHES: dict[str, list[tuple[int, tuple[int, int, int]]]] = {
    "x86_64": [(0xC000003E, (248, 249, 250)), (0x40000003, (286, 287, 288))],
    "aarch64": [(0xC00000B7, (217, 218, 219)), (0x40000028, (309, 310, 311))],
    "riscv64": [(0xC00000F3, (217, 218, 219))],
}
X32_BIT = 0x40000000  # x86_64's x32 ABI: the same numbers with this bit set, under the x86_64 audit arch
_LD_W_ABS, _JEQ_K, _AND_K, _RET_K = 0x20, 0x15, 0x54, 0x06
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def program(machine: str | None = None) -> bytes | None:
    """The filter as bwrap reads it (struct sock_filter[]), or None where the machine's numbers are not known."""
    arches = ARCHES.get(machine or platform.machine())
    if arches is None:
        return None
    insns: list[tuple[int, int, int, int]] = []
    for arch, numbers in arches:
        block = [(_LD_W_ABS, 0, 0, _NR), (_AND_K, 0, 0, ~X32_BIT & 0xFFFFFFFF)]
        deny_at = len(block) + len(numbers) + 1  # after the comparisons and the allow
        for nr in numbers:
            block.append((_JEQ_K, deny_at - len(block) - 1, 0, nr))
        block += [(_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, _DENY)]
        insns += [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 0, len(block), arch), *block]
    insns.append((_RET_K, 0, 0, _ALLOW))
    return b"".join(struct.pack("=HBBI", *i) for i in insns)


def filter_fd() -> int | None:
    """A fresh memfd holding the program, at fd 10 or above (the isolation prefix uses 5-9), close-on-exec (pass it
    with Popen's pass_fds; bwrap reads it to the end, so each bwrap needs its own), or None (see `program`)."""
    prog = program()
    if prog is None:
        return None
    fd = os.memfd_create("rise-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, prog)
        os.lseek(fd, 0, os.SEEK_SET)
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    finally:
        os.close(fd)
