package uring

import (
	"encoding/binary"
	"unsafe"
)

// The FUSE side of the transport, as include/uapi/linux/fuse.h (protocol
// 7.42) and Documentation/filesystems/fuse-io-uring.rst define it.
//
// Each ring entry is two buffers the kernel learns at registration: a
// header (struct fuse_uring_req_header) and a payload buffer. For a request
// the kernel writes the fuse_in_header into in_out, the opcode's fixed
// argument (fuse_open_in, fuse_write_in...) into op_in, everything else
// (names, write data) into the payload, and the sizes into ring_ent_in_out.
// The reply goes the same way back: fuse_out_header into in_out, and ALL
// reply arguments, the fixed out struct included, into the payload, with
// their length in ring_ent_in_out.payload_sz.

// CapOverIOUring is FUSE_OVER_IO_URING: bit 41 of the 64-bit INIT flags
// (bit 9 of flags2). The kernel offers it in INIT when the fuse module's
// enable_uring parameter is set; the server takes it by setting it in its
// INIT reply.
const CapOverIOUring = 1 << 41

// Commands of an IORING_OP_URING_CMD SQE on /dev/fuse (enum fuse_uring_cmd).
const (
	// cmdInvalid is FUSE_IO_URING_CMD_INVALID, which the kernel refuses;
	// waitInit uses the way it refuses.
	cmdInvalid = 0
	// cmdRegister registers an entry's buffers with queue qid and waits for
	// a request.
	cmdRegister = 1 // FUSE_IO_URING_CMD_REGISTER
	// cmdCommitAndFetch sends the reply in the entry's buffers and waits
	// for the next request, in one SQE.
	cmdCommitAndFetch = 2 // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
)

// Sizes and offsets of struct fuse_uring_req_header.
const (
	headerInOutSize = 128 // FUSE_URING_IN_OUT_HEADER_SZ: fuse_in_header / fuse_out_header
	headerOpInSize  = 128 // FUSE_URING_OP_IN_OUT_SZ: the opcode's fixed argument
	offOpIn         = headerInOutSize
	offEntInOut     = headerInOutSize + headerOpInSize // struct fuse_uring_ent_in_out
	// HeaderSize is sizeof(struct fuse_uring_req_header).
	HeaderSize = offEntInOut + sizeofEntInOut

	sizeofEntInOut = 32 // struct fuse_uring_ent_in_out
	sizeofCmdReq   = 24 // struct fuse_uring_cmd_req, in the SQE's cmd area

	sizeofInHeader  = 40 // struct fuse_in_header
	sizeofOutHeader = 16 // struct fuse_out_header
)

// entInOut is struct fuse_uring_ent_in_out (32 bytes), at offEntInOut in
// the header buffer.
// Only its size is used here (the fields are read and written at their
// offsets in the buffer); in the uapi's order they are:
type entInOut struct {
	_ uint64 // flags
	// commit_id names the request in the COMMIT_AND_FETCH that answers it
	// (the kernel uses the request's unique).
	_ uint64
	// payload_sz is the number of payload bytes: the request's, written by
	// the kernel; the reply's, written by us.
	_ uint32
	_ uint32 // padding
	_ uint64 // reserved
}

// cmdReq is struct fuse_uring_cmd_req (24 bytes), in the cmd area of the
// 128-byte SQE.
type cmdReq struct {
	flags    uint64
	commitID uint64 // for COMMIT_AND_FETCH
	qid      uint16 // the queue (CPU) of the entry
	padding  [6]uint8
}

// setCmd fills e as a FUSE uring command on fixed file 0.
func (e *sqe) setCmd(op uint32, req cmdReq, userData uint64) {
	e.opcode = opUringCmd
	e.flags = sqeFixedFile
	e.fd = 0
	e.off = uint64(op) // cmd_op is the low half of the off union
	e.userData = userData
	*(*cmdReq)(unsafe.Pointer(&e.cmd[0])) = req
}

// request is the view of a filled entry: the request's iov and what the
// reply needs.
type request struct {
	unique    uint64
	commitID  uint64
	opcode    uint32
	in        [3][]byte // in header, op header, payload
	malformed bool
}

// parseEntry reads what the kernel wrote into an entry's header and
// payload buffers and returns the request as go-fuse's decoder wants it:
// fuse_in_header, the op header, the payload, contiguous as an iov. The op
// header's length is what is left of in_header.len after the in header and
// the payload.
func parseEntry(hdr, payload []byte) request {
	var r request
	le := binary.LittleEndian
	inLen := le.Uint32(hdr[0:4])
	r.opcode = le.Uint32(hdr[4:8])
	r.unique = le.Uint64(hdr[8:16])
	r.commitID = le.Uint64(hdr[offEntInOut+8:])
	payloadSz := le.Uint32(hdr[offEntInOut+16:])
	if inLen < sizeofInHeader || payloadSz > uint32(len(payload)) || inLen-sizeofInHeader < payloadSz ||
		inLen-sizeofInHeader-payloadSz > headerOpInSize {
		r.malformed = true
		return r
	}
	opLen := inLen - sizeofInHeader - payloadSz
	r.in = [3][]byte{hdr[:sizeofInHeader], hdr[offOpIn : offOpIn+opLen], payload[:payloadSz]}
	return r
}

// setReplySize records the reply's payload length (all bytes after the
// fuse_out_header) in the entry header.
func setReplySize(hdr []byte, payloadSz uint32) {
	binary.LittleEndian.PutUint32(hdr[offEntInOut+16:], payloadSz)
}

// setErrorReply writes a fuse_out_header with error errno (positive) for
// unique and an empty payload.
func setErrorReply(hdr []byte, unique uint64, errno int32) {
	le := binary.LittleEndian
	le.PutUint32(hdr[0:4], sizeofOutHeader)
	le.PutUint32(hdr[4:8], uint32(-errno))
	le.PutUint64(hdr[8:16], unique)
	setReplySize(hdr, 0)
}
