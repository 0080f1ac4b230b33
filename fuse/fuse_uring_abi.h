// The FUSE-over-io_uring part of the kernel's uapi (include/uapi/linux/fuse.h, protocol 7.42,
// Linux 6.14), which Debian 12's <linux/fuse.h> (7.38) lacks. Own names, so that a newer system
// header that has the originals does not clash; the layouts are the kernel's ABI and are checked
// below.
#pragma once

#include <linux/fuse.h>

#include <cstddef>
#include <cstdint>

namespace dsfs::fuse_uring {

// INIT flag (bit 41, so in fuse_init_in/out.flags2 as bit 9): the kernel offers the io_uring
// transport (it does so only while /sys/module/fuse/parameters/enable_uring is Y), and the
// server's reply takes it up.
constexpr uint64_t kOverIoUring = 1ULL << 41;

constexpr size_t kInOutHeaderSize = 128;  // FUSE_URING_IN_OUT_HEADER_SZ
constexpr size_t kOpInOutSize = 128;      // FUSE_URING_OP_IN_OUT_SZ

// struct fuse_uring_ent_in_out
struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;   // the request's unique, to be named in the commit
  uint32_t payload_sz;  // bytes used in the payload buffer, in either direction
  uint32_t padding;
  uint64_t reserved;
};

// struct fuse_uring_req_header: iov[0] of a REGISTER.
struct ReqHeader {
  char in_out[kInOutHeaderSize];  // fuse_in_header (request) / fuse_out_header (reply)
  char op_in[kOpInOutSize];       // the request's first argument (the per-opcode struct)
  EntInOut ring_ent_in_out;
};

// enum fuse_uring_cmd: IORING_OP_URING_CMD's cmd_op on /dev/fuse.
constexpr uint32_t kCmdRegister = 1;        // FUSE_IO_URING_CMD_REGISTER
constexpr uint32_t kCmdCommitAndFetch = 2;  // FUSE_IO_URING_CMD_COMMIT_AND_FETCH

// struct fuse_uring_cmd_req: in the 80-byte command area of a 128-byte SQE.
struct CmdReq {
  uint64_t flags;
  uint64_t commit_id;  // 0 for REGISTER
  uint16_t qid;        // the queue (= CPU number)
  uint8_t padding[6];
};

static_assert(sizeof(EntInOut) == 32);
static_assert(sizeof(ReqHeader) == 288);
static_assert(offsetof(ReqHeader, op_in) == 128);
static_assert(offsetof(ReqHeader, ring_ent_in_out) == 256);
static_assert(sizeof(CmdReq) == 24);
static_assert(sizeof(fuse_in_header) <= kInOutHeaderSize);

}  // namespace dsfs::fuse_uring
