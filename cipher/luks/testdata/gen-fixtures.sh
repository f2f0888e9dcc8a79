#!/bin/sh
# Regenerates the frozen volumes in this directory with the installed
# cryptsetup (they were made with cryptsetup 2.6.1, Debian 12). The volume
# keys are random: after regenerating, put the keys this script prints into
# frozen_test.go.
#
#   luks1-cbc-essiv-128.img.gz   LUKS1, aes-cbc-essiv:sha256, 128-bit key,
#                                pbkdf2-sha256 1000 iterations, payload at
#                                sector 1032, 8 sectors of zero payload.
#   luks2-xts-4096.hdr.gz        LUKS2 detached header: aes-xts-plain64,
#   luks2-xts-4096.data.gz       256-bit key, 4096-byte sectors, argon2id
#                                (4 passes, 32 KiB, 1 lane); the data file is
#                                64 KiB of known plaintext that cryptsetup
#                                itself encrypted (reencrypt --encrypt).
#
# Passphrase of both: "twincrypt". Unused keyslot space, random in
# cryptsetup's output, is zeroed so that the files compress; nothing reads
# it.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf twincrypt > "$tmp/key"

truncate -s $((1040 * 512)) "$tmp/l1"
cryptsetup luksFormat --batch-mode --type luks1 --key-file "$tmp/key" \
	--cipher aes-cbc-essiv:sha256 --key-size 128 --hash sha256 \
	--pbkdf-force-iterations 1000 --align-payload 8 "$tmp/l1"
# Keyslot 0 holds 16*4000 bytes from sector 8: sectors 8..132.
dd if=/dev/zero of="$tmp/l1" bs=512 seek=133 count=$((1032 - 133)) conv=notrunc status=none
gzip -9 -n -c "$tmp/l1" > luks1-cbc-essiv-128.img.gz
echo "luks1 key:"; cryptsetup luksDump --dump-volume-key --batch-mode --key-file "$tmp/key" "$tmp/l1" | sed -n '/MK dump/,$p'

# The plaintext is pattern(65536, "fixture") of iv_test.go.
python3 -c '
import hashlib, sys
b = b""
i = 0
while len(b) < 65536:
    b += hashlib.sha256(("fixture" + str(i)).encode()).digest()
    i += 1
sys.stdout.buffer.write(b[:65536])' > "$tmp/data"
cryptsetup reencrypt --encrypt --type luks2 --batch-mode --key-file "$tmp/key" \
	--cipher aes-xts-plain64 --key-size 256 --sector-size 4096 \
	--pbkdf argon2id --pbkdf-force-iterations 4 --pbkdf-memory 32 --pbkdf-parallel 1 \
	--luks2-metadata-size 16k --luks2-keyslots-size 192k --header "$tmp/hdr" "$tmp/data"
# Keyslot 0 holds 32*4000 bytes at 32 KiB: up to byte 160768.
dd if=/dev/zero of="$tmp/hdr" bs=512 seek=314 count=$((448 - 314)) conv=notrunc status=none
gzip -9 -n -c "$tmp/hdr" > luks2-xts-4096.hdr.gz
gzip -9 -n -c "$tmp/data" > luks2-xts-4096.data.gz
echo "luks2 key:"; cryptsetup luksDump --dump-volume-key --batch-mode --key-file "$tmp/key" "$tmp/hdr" | sed -n '/MK dump/,$p'
