//! The small identifier types every layer of the model names, at the bottom
//! of the module graph so that lower modules (folio, vma, mm) need not import
//! the syscall modules that define processes and userfaultfd contexts.

/// A process of the model (`main` is 1; fork children count up).
pub type Pid = u32;

/// A userfaultfd context (one `struct userfaultfd_ctx`), numbered by the
/// model from 1.
pub type UffdId = u32;

pub mod errno;
pub mod uapi;
