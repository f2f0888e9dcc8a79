package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	fsecryptfs "github.com/twincrypt/twincrypt/fs/ecryptfs"
)

// ecryptfsKeyFlags say where the eCryptfs mount passphrase comes from.
type ecryptfsKeyFlags struct {
	passfile  string // --ecryptfs-passfile: the mount passphrase
	wrapped   string // --wrapped-passphrase: ~/.ecryptfs/wrapped-passphrase
	loginPass string // --login-passfile: the passphrase that unwraps it
	salt      string // --salt: hex, ~/.ecryptfsrc's salt=
}

func (f *ecryptfsKeyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.passfile, "ecryptfs-passfile", "", "read the eCryptfs mount passphrase from the first line of `FILE`")
	fl.StringVar(&f.wrapped, "wrapped-passphrase", "", "take the mount passphrase from an encrypted home's wrapped-passphrase `FILE` (~/.ecryptfs/wrapped-passphrase), unwrapped with the login passphrase")
	fl.StringVar(&f.loginPass, "login-passfile", "", "read the login passphrase for --wrapped-passphrase from `FILE` (default: ask)")
	fl.StringVar(&f.salt, "salt", hex.EncodeToString(ecryptfs.DefaultSalt), "the mount key's salt in `HEX` (salt= of ~/.ecryptfsrc; also unwraps version-1 wrapped-passphrase files)")
}

// keyring derives the keys of the eCryptfs mount passphrase: with the
// salt (the file keys) and with ecryptfs-utils' filename-key salt.
func (f *ecryptfsKeyFlags) keyring(cmd *cobra.Command) (*ecryptfs.Keyring, error) {
	salt, err := hex.DecodeString(f.salt)
	if err != nil || len(salt) != ecryptfs.SaltSize {
		return nil, usageErrorf("--salt %q: want %d bytes in hex", f.salt, ecryptfs.SaltSize)
	}
	var pass []byte
	switch {
	case f.wrapped != "" && f.passfile != "":
		return nil, usageErrorf("--ecryptfs-passfile and --wrapped-passphrase: give one of them")
	case f.wrapped != "":
		data, err := os.ReadFile(f.wrapped)
		if err != nil {
			return nil, err
		}
		login, err := passFlags{passfile: f.loginPass}.source(cmd.ErrOrStderr()).read(false)
		if err != nil {
			return nil, err
		}
		defer wipe(login)
		mp, err := ecryptfs.UnwrapPassphrase(data, string(login), salt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.wrapped, err)
		}
		pass = []byte(mp)
	default:
		if f.passfile == "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "eCryptfs mount passphrase:")
		}
		pass, err = passFlags{passfile: f.passfile}.source(cmd.ErrOrStderr()).read(false)
		if err != nil {
			return nil, err
		}
	}
	defer wipe(pass)
	kr := ecryptfs.NewKeyring()
	if err := kr.AddPassphrase(string(pass), salt, ecryptfs.FNEKSalt); err != nil {
		return nil, err
	}
	return kr, nil
}

func newEcryptfsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ecryptfs",
		Short: "Read eCryptfs directories without the kernel module: mount read-only, or import into a twincrypt volume",
		Long: `Read the lower directory of an eCryptfs mount (an encrypted home's
~/.Private or /home/.ecryptfs/USER/.Private) without the kernel's eCryptfs:
passphrase mounts, the wrapped-passphrase file of encrypted homes, encrypted
file names, headers in the files or in xattrs. AES only; public-key mounts
are refused. The source is never written. See cipher/ecryptfs/FORMAT.md.`,
	}
	cmd.AddCommand(newEcryptfsMountCmd(), newEcryptfsImportCmd())
	return cmd
}

func newEcryptfsMountCmd() *cobra.Command {
	var kf ecryptfsKeyFlags
	var instr instrFlags
	var allowOther bool
	cmd := &cobra.Command{
		Use:   "mount LOWER MNT",
		Short: "Show an eCryptfs lower directory read-only at MNT (in the foreground, until unmounted)",
		Long: `Show the plaintext of the eCryptfs lower directory LOWER read-only at MNT,
in the foreground until 'twincrypt umount MNT' or Ctrl-C. Operations are
timed as on twincrypt's own mounts ('twincrypt stats MNT', --summary,
--oplog, --metrics; --no-stats turns timing off).`,
		Args: exactArgs(2, "LOWER and MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			lower, mnt := args[0], args[1]
			if instr.mirror != "" {
				return usageErrorf("--mirror is for twincrypt volumes, not for eCryptfs")
			}
			if err := instr.check(lower, mnt); err != nil {
				return err
			}
			kr, err := kf.keyring(cmd)
			if err != nil {
				return err
			}
			log := newLogger(cmd.ErrOrStderr(), false)
			sigs := catchSignals()
			defer signal.Stop(sigs)
			in, err := startInstrument(instr, mnt, log)
			if err != nil {
				return err
			}
			// Unmounted at a signal through the directory it covers,
			// as twincrypt's own mounts are (mountHandle).
			mntDir, err := openMountDir(mnt)
			if err != nil {
				in.stop(io.Discard, true)
				return mountpointErrorf("%v", err)
			}
			srv, err := fsecryptfs.Mount(lower, mnt, kr, fsecryptfs.MountOptions{Recorder: in.rec, AllowOther: allowOther, Log: log})
			if err == nil {
				err = srv.WaitMount()
			}
			if err != nil {
				mntDir.Close()
				in.stop(io.Discard, true)
				return mountFailedErrorf("mount %s at %s: %v", lower, mnt, err)
			}
			mh, err := holdMount(mntDir)
			if err != nil {
				log.Error().Msgf("mount %s: %v; unmount it with 'twincrypt umount'", mnt, err)
			} else {
				defer mh.close()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "eCryptfs %s mounted read-only at %s\n", lower, mnt)
			serveUntilUnmounted(srv, sigs, mh, mnt, in, log, func() {})
			return in.stop(cmd.ErrOrStderr(), false)
		},
	}
	kf.register(cmd)
	instr.register(cmd.Flags())
	cmd.Flags().BoolVar(&allowOther, "allow-other", false, "let other users see the mount")
	return cmd
}

func newEcryptfsImportCmd() *cobra.Command {
	var kf ecryptfsKeyFlags
	var vf passFlags
	var nf initFlags // the new volume's cipher and KDF, as for init
	var journal string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "import LOWER NEWVOL",
		Short: "Copy an eCryptfs lower directory into a new twincrypt volume, verified and resumable",
		Long: `Create the twincrypt volume NEWVOL (a missing or empty directory), mount it
in-process and copy the decrypted eCryptfs tree LOWER into it: contents,
modes, owners (as root), times, user xattrs, symlinks, hard links. Every
entry is read back from the new volume and compared before it counts as
done. A journal (NEWVOL.ecryptfs-import by default) records what is done:
run the same command again to resume an interrupted import. A file that
cannot be read (corrupt, truncated, wrong key) is reported and the rest is
imported; the exit status is then 1.`,
		Args: exactArgs(2, "LOWER and NEWVOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			keyBytes, err := resolveKeyBytes(nf.cipher, nf.keyBytes)
			if err != nil {
				return err
			}
			params, err := kdfParamsFromFlags(nf, cmd.Flags().Changed)
			if err != nil {
				return err
			}
			kr, err := kf.keyring(cmd)
			if err != nil {
				return err
			}
			if !vf.given() {
				fmt.Fprintln(cmd.ErrOrStderr(), "Passphrase of the new twincrypt volume:")
			}
			pass, err := vf.source(cmd.ErrOrStderr()).read(true)
			if err != nil {
				return err
			}
			defer wipe(pass)
			out := cmd.ErrOrStderr()
			last := time.Now()
			o := fsecryptfs.VolumeOptions{Passphrase: pass, Config: config.Options{Cipher: nf.cipher, KeyBytes: keyBytes, KDF: params, Creator: "twincrypt " + buildVersion() + " ecryptfs import"},
				Log: newLogger(out, false)}
			o.Journal = journal
			o.Progress = func(p fsecryptfs.Progress) error {
				if !quiet && time.Since(last) > time.Second {
					last = time.Now()
					fmt.Fprintf(out, "%d entries (%d resumed, %d failed), %s copied: %s\n", p.Entries, p.Resumed, p.Failed, sizeString(p.Bytes), p.Current)
				}
				return nil
			}
			rep, err := fsecryptfs.ImportVolume(args[0], kr, args[1], o)
			if rep != nil {
				printImportReport(cmd.OutOrStdout(), rep)
			}
			return err
		},
	}
	kf.register(cmd)
	vf.register(cmd.Flags(), "read the new volume's passphrase from the first line of `FILE`")
	cmd.Flags().StringVar(&journal, "journal", "", "keep the import journal in `FILE` (default NEWVOL.ecryptfs-import)")
	fl := cmd.Flags()
	fl.StringVar(&nf.cipher, "cipher", "aes-xts", "the new volume's content cipher: aes-xts or aes-cbc")
	fl.IntVar(&nf.keyBytes, "key-bytes", 0, "the new volume's key size, as for init")
	fl.StringVar(&nf.kdf, "kdf", "argon2id", "the new volume's passphrase key derivation, as for init")
	fl.Uint32Var(&nf.kdfTime, "kdf-time", 0, "argon2id passes (default: the KDF's default)")
	fl.Uint32Var(&nf.kdfMemoryKiB, "kdf-memory", 0, "argon2id memory in KiB (default: the KDF's default)")
	fl.Uint8Var(&nf.kdfThreads, "kdf-threads", 0, "argon2id parallelism (default: the KDF's default)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines")
	return cmd
}

func printImportReport(w io.Writer, r *fsecryptfs.Report) {
	fmt.Fprintf(w, "Imported %d files, %d directories, %d symlinks, %d hard links, %d special files, %s in %v (%d entries resumed from the journal)\n",
		r.Files, r.Dirs, r.Symlinks, r.HardLinks, r.Special, sizeString(r.Bytes), r.Duration.Round(time.Millisecond), r.Resumed)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED %s: %v\n", f.Path, f.Err)
	}
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
