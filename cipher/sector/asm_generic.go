//go:build !amd64 || purego

package sector

// Without assembly every cipher uses implGeneric, so no asmBlock is ever
// made and the functions below are unreachable.

func detectImpl() impl { return implGeneric }

func availableImpls() []impl { return []impl{implGeneric} }

func subWord(w uint32) uint32       { return subWordGeneric32(w) }
func invMixColumns(dst, src []byte) { invMixColumnsGeneric(dst, src) }

const noAsm = "sector: no assembly on this platform"

func encryptBlockAsm(rk *byte, nr int, dst, src *byte) { panic(noAsm) }
func decryptBlockAsm(rk *byte, nr int, dst, src *byte) { panic(noAsm) }

func xtsBulk(b *asmBlock, encrypt bool, dst, src []byte, tw *[16]byte) { panic(noAsm) }
func cbcEncBulk(b *asmBlock, dst, src []byte, iv *[16]byte)            { panic(noAsm) }
func cbcDecBulk(b *asmBlock, dst, src []byte, iv *[16]byte)            { panic(noAsm) }
func cbcLaneCounts(b *asmBlock) []int                                  { panic(noAsm) }

func cbcEncLanes(b *asmBlock, lanes int, dst, src []byte, unitSize int, ivs *[maxLanes * blockSize]byte) {
	panic(noAsm)
}

func xtsUnitsBulk(k1, k2 *asmBlock, encrypt bool, dst, src []byte, unitSize int, unit, mask uint64) bool {
	return false
}
