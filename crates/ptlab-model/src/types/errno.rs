//! Linux errno values returned by modelled system calls.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! errnos {
    ($($name:ident = $val:expr, $desc:expr;)*) => {
        /// An errno as the x86-64/arm64 generic ABI numbers it.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
        pub enum Errno { $($name),* }

        impl Errno {
            pub const ALL: &'static [Errno] = &[$(Errno::$name),*];
            pub const fn code(self) -> i32 {
                match self { $(Errno::$name => $val),* }
            }
            pub const fn name(self) -> &'static str {
                match self { $(Errno::$name => stringify!($name)),* }
            }
            pub const fn description(self) -> &'static str {
                match self { $(Errno::$name => $desc),* }
            }
            pub fn from_code(code: i32) -> Option<Errno> {
                match code { $($val => Some(Errno::$name),)* _ => None }
            }
            pub fn from_name(name: &str) -> Option<Errno> {
                match name { $(stringify!($name) => Some(Errno::$name),)* _ => None }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    ESRCH = 3, "No such process";
    EINTR = 4, "Interrupted system call";
    EIO = 5, "Input/output error";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EINVAL = 22, "Invalid argument";
    ENOSYS = 38, "Function not implemented";
    EOVERFLOW = 75, "Value too large for defined data type";
    ENOTSUP = 95, "Operation not supported";
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.description())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trip() {
        for &e in Errno::ALL {
            assert_eq!(Errno::from_code(e.code()), Some(e));
            assert_eq!(Errno::from_name(e.name()), Some(e));
        }
        assert_eq!(Errno::EINVAL.code(), 22);
    }
}
