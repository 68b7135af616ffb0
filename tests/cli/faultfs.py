#!/usr/bin/env python3
"""faultfs: a FUSE passthrough file system that fails I/O on demand, for tests.

It mirrors BACKING_DIR at MOUNTPOINT and returns an errno of your choosing from
reads, writes, fsyncs or file creations that match a rule in CONTROL_FILE, so a
test can make a drive fail under a running `zinf train`.

Usage (runs in the foreground; SIGTERM, SIGINT or `fusermount -u MOUNTPOINT`
unmounts it and it exits 0):

    python3 tests/cli/faultfs.py BACKING_DIR MOUNTPOINT --control CONTROL_FILE &
    until mountpoint -q MOUNTPOINT; do sleep 0.1; done

Needs fusepy (pip install fusepy) and libfuse2 (Debian: apt-get install fuse3 libfuse2).

CONTROL_FILE lies outside the mount. It is re-read when its inode, mtime or size
changes; absent or empty: no faults. Write it whole (a temporary file, then mv).
One JSON object, every key optional:

    {"op": "write", "errno": "EIO", "match": "rank0", "after_bytes": 1048576, "count": 0}

  op           read, write, fsync (files and directories), create (new files, mkdir)
               or any (all four); default any
  errno        an errno name: EIO (default), ENOSPC, EDQUOT, EROFS, ...
  match        a substring of the path below the mount root ("/run/rank0/optim");
               "" or absent: every path (a file unlinked while open has path "")
  after_bytes  read/write: bytes of matching requests let through, counted from when
               this content was loaded; the first request that would go past it
               fails, and every matching one after it; 0: fail the next one
  after_ops    fsync/create: the same, in operations
  count        failures before the rule disarms itself; 0: never (a dead drive)

Each failure appends a line to CONTROL_FILE + ".log", e.g.
    write EIO /zinf-run/rank0/optimizer offset 4194304 len 131072

Offsets and lengths are the kernel's: it splits IO into requests of at most 128 KiB,
and buffered reads become readahead. When a request other than the first of a split
O_DIRECT read or write fails, the kernel redoes the rest through the page cache, so
the caller sees a short count (count 0) or no error at all (the retry passes): make
after_bytes a multiple of the caller's IO size to fail whole calls. A read fault
under an mmap is SIGBUS. Linux sends no rename flags to libfuse 2, so
renameat2(RENAME_EXCHANGE or RENAME_NOREPLACE) fails here with EINVAL.
"""
import argparse, ctypes, errno, json, os, sys, threading, time

import fuse
if not hasattr(fuse, 'fuse_operations'):
    sys.exit('faultfs: the module "fuse" here is not fusepy (pip install fusepy)')
from fuse import FUSE, FuseOSError, Operations

# fusepy 3.0.1's fuse_operations stops at ioctl, so libfuse never sees a fallocate
# handler and fallocate(2) would fail EOPNOTSUPP; libfuse 2.9 appends these members.
if 'fallocate' not in [f[0] for f in fuse.fuse_operations._fields_]:
    class _Operations(ctypes.Structure):
        _fields_ = fuse.fuse_operations._fields_ + [
            ('poll', ctypes.c_voidp), ('write_buf', ctypes.c_voidp),
            ('read_buf', ctypes.c_voidp), ('flock', ctypes.c_voidp),
            ('fallocate', ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, fuse.c_off_t,
                                           fuse.c_off_t, ctypes.POINTER(fuse.fuse_file_info)))]
    fuse.fuse_operations = _Operations

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2  # libfuse passes these with tv_sec 0
OPS = ('read', 'write', 'fsync', 'create')


class FaultFUSE(FUSE):
    # fusepy drops the open flags of create(); O_EXCL and the access mode matter.
    def create(self, path, mode, fip):
        fip.contents.fh = self.operations('create', path.decode(), mode, fip.contents.flags)
        return 0

    def fallocate(self, path, mode, offset, length, fip):
        return self.operations('fallocate', self._decode_optional_path(path), mode, offset, length,
                               fip.contents.fh)


class Faults:
    def __init__(self, control):
        self.control, self.log = control, control + '.log'
        self.lock = threading.Lock()
        self.key, self.rule = None, None

    def _reload(self):
        try:
            st = os.stat(self.control)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        if key == self.key:
            return
        self.key, self.rule = key, None
        if not key or not key[2]:
            return
        try:
            with open(self.control) as f:
                spec = json.load(f)
            rule = dict(op=spec.get('op', 'any'), errno=getattr(errno, spec.get('errno', 'EIO')),
                        name=spec.get('errno', 'EIO'), match=spec.get('match') or '',
                        after_bytes=int(spec.get('after_bytes', 0)), after_ops=int(spec.get('after_ops', 0)),
                        count=int(spec.get('count', 0)), bytes=0, ops=0, tripped=False, failed=0)
            if rule['op'] not in OPS + ('any',) or rule['errno'] not in errno.errorcode:
                raise ValueError('bad op or errno')
        except (OSError, ValueError, TypeError, AttributeError) as e:
            print(f'faultfs: ignoring {self.control}: {e!r}', file=sys.stderr)
            return
        self.rule = rule
        print(f'faultfs: armed {json.dumps(spec)}', file=sys.stderr)

    def check(self, op, path, size=None, offset=None):
        with self.lock:
            self._reload()
            r = self.rule
            if not r or r['op'] not in (op, 'any') or r['match'] not in (path or ''):
                return
            if r['count'] and r['failed'] >= r['count']:
                return
            if not r['tripped']:
                # Counted before the IO runs, so concurrent requests cannot overshoot.
                if size is None:
                    r['tripped'] = r['ops'] >= r['after_ops']
                    r['ops'] += 1
                else:
                    r['tripped'] = r['bytes'] + size > r['after_bytes']
                    r['bytes'] += 0 if r['tripped'] else size
                if not r['tripped']:
                    return
            r['failed'] += 1
            where = '' if size is None else f' offset {offset} len {size}'
            with open(self.log, 'a') as f:
                f.write(f'{op} {r["name"]} {path or ""}{where}\n')
                f.flush()
            raise FuseOSError(r['errno'])


class FaultFS(Operations):
    use_ns = True  # times in integer nanoseconds, so UTIME_NOW/OMIT can be told apart
    flag_nullpath_ok = 1  # IO on files unlinked while open still works (hard_remove)
    flag_utime_omit_ok = 1  # else libfuse drops a utimensat that sets only one time

    def __init__(self, root, faults):
        self.root, self.faults = os.path.realpath(root), faults

    def _p(self, path):
        return self.root + path

    def getattr(self, path, fh=None):
        st = os.fstat(fh) if isinstance(fh, int) else os.lstat(self._p(path))
        d = {k: getattr(st, k) for k in ('st_mode', 'st_nlink', 'st_uid', 'st_gid', 'st_size',
                                         'st_blocks', 'st_blksize', 'st_rdev', 'st_ino')}
        d.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return d

    def statfs(self, path):
        sv = os.statvfs(self.root)
        return {k: getattr(sv, k) for k in ('f_bsize', 'f_frsize', 'f_blocks', 'f_bfree', 'f_bavail',
                                            'f_files', 'f_ffree', 'f_favail', 'f_flag', 'f_namemax')}

    def readdir(self, path, fh):
        return ['.', '..'] + os.listdir(self._p(path))

    def opendir(self, path):
        return os.open(self._p(path), os.O_RDONLY | os.O_DIRECTORY)

    def releasedir(self, path, fh):
        os.close(fh)

    def fsyncdir(self, path, datasync, fh):
        self.faults.check('fsync', path)
        os.fsync(fh)

    def mkdir(self, path, mode):
        self.faults.check('create', path)
        os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        os.rmdir(self._p(path))

    def unlink(self, path):
        os.unlink(self._p(path))

    def rename(self, old, new):
        os.rename(self._p(old), self._p(new))

    def symlink(self, target, source):
        os.symlink(source, self._p(target))

    def readlink(self, path):
        return os.readlink(self._p(path))

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)

    def utimens(self, path, times=None):
        p = self._p(path)
        if times is None:
            return os.utime(p, follow_symlinks=False)
        st = os.lstat(p)
        ns = [time.time_ns() if t == UTIME_NOW else old if t == UTIME_OMIT else t
              for t, old in zip(times, (st.st_atime_ns, st.st_mtime_ns))]
        os.utime(p, ns=tuple(ns), follow_symlinks=False)

    # The kernel already does O_DIRECT's bypass of its page cache; the backing file
    # is opened without it because libfuse's buffers are not aligned. O_APPEND would
    # make pwrite ignore the offset the kernel computed.
    def _flags(self, flags):
        return flags & ~(os.O_DIRECT | os.O_APPEND)

    def open(self, path, flags):
        return os.open(self._p(path), self._flags(flags))

    def create(self, path, mode, flags=os.O_RDWR):
        self.faults.check('create', path)
        return os.open(self._p(path), self._flags(flags) | os.O_CREAT, mode)

    def release(self, path, fh):
        os.close(fh)

    def read(self, path, size, offset, fh):
        self.faults.check('read', path, size, offset)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self.faults.check('write', path, len(data), offset)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if isinstance(fh, int):
            os.ftruncate(fh, length)
        else:
            os.truncate(self._p(path), length)

    def fallocate(self, path, mode, offset, length, fh):
        if _libc.fallocate(fh, mode, offset, length) != 0:
            raise FuseOSError(ctypes.get_errno())

    def fsync(self, path, datasync, fh):
        self.faults.check('fsync', path)
        (os.fdatasync if datasync else os.fsync)(fh)


def main():
    ap = argparse.ArgumentParser(description='FUSE passthrough that fails IO on demand')
    ap.add_argument('backing')
    ap.add_argument('mountpoint')
    ap.add_argument('--control', required=True, help='JSON fault rule, outside the mount')
    ap.add_argument('--debug', action='store_true', help="libfuse's request trace on stderr")
    a = ap.parse_args()
    mnt = os.path.realpath(a.mountpoint)
    if (os.path.realpath(a.control) + '/').startswith(mnt + '/'):
        sys.exit('faultfs: the control file must lie outside the mount')
    if not os.path.isdir(a.backing):
        sys.exit(f'faultfs: {a.backing} is not a directory')
    os.umask(0)  # the kernel has applied the caller's umask to create and mkdir modes
    # Zero cache timeouts: the mount shows the backing directory as it is, even
    # when a test changes that directly. hard_remove: no .fuse_hidden files that
    # would keep a directory from being removed. big_writes: 128 KiB requests, not 4 KiB.
    try:
        FaultFUSE(FaultFS(a.backing, Faults(os.path.abspath(a.control))), mnt, foreground=True,
                  nothreads=False, debug=a.debug, fsname='faultfs', hard_remove=True, big_writes=True,
                  attr_timeout=0, entry_timeout=0, negative_timeout=0)
    except RuntimeError as e:  # libfuse has printed why
        sys.exit(f'faultfs: mounting {mnt} failed ({e})')


if __name__ == '__main__':
    main()
