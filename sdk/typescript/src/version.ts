// The package's version: the memtape server's (the Rust workspace's), which the tests check.

export const VERSION = '0.1.0';
