# Prints this build's allreduce dispatch table, one JSON line per
# (ngpus, dtype, bytes): the kernel the runtime `select_kernel` picks. It calls
# the very function the launch path calls, with the same -D size windows, and
# needs no GPU, so the table is tested on any machine.
# Build: mojo build -I kernels_mojo --target-accelerator sm_90 [-D ...] kernels_mojo/bin/dispatch_table.mojo

from allreduce.dispatch import SUPPORTED_NGPUS, kernel_name, select_kernel


def main() raises:
    comptime dtypes = (DType.float32, DType.bfloat16, DType.float16)
    comptime for gi in range(len(SUPPORTED_NGPUS)):
        comptime ngpus = SUPPORTED_NGPUS[gi]
        comptime for di in range(len(dtypes)):
            comptime dtype = dtypes[di]
            var nbytes = 1024
            while nbytes <= 1024 * 1024 * 1024:
                var k = select_kernel(nbytes, ngpus, dtype)
                print(String('{"ngpus":', ngpus, ',"dtype":"', dtype, '","bytes":', nbytes, ',"kernel":"', kernel_name(k), '"}'))
                nbytes *= 2
