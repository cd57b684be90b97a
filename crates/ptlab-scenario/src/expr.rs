//! Evaluation of integer expressions.
//!
//! All arithmetic is on `u64` and checked: overflow, underflow, division by
//! zero and oversized shifts are errors carrying the operator's position.
//! The one exception is unary minus, which is two's-complement negation so
//! that mask idioms such as `x & -PAGE` work.

use crate::ast::{BinOp, Builtin, Expr, NameId, Pos};
use std::fmt;

/// An evaluation error at a source position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError {
    pub pos: Pos,
    pub message: String,
}

impl EvalError {
    pub fn new(pos: Pos, message: impl Into<String>) -> Self {
        EvalError {
            pos,
            message: message.into(),
        }
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.pos.line, self.pos.column, self.message)
    }
}

/// Where variables get their values.
pub trait Env {
    /// The integer value of `id`, or an error naming why it has none.
    fn int(&self, id: NameId, pos: Pos) -> Result<u64, EvalError>;
}

/// Format a number the way messages show it: decimal when small, hex when
/// it looks like an address or a size.
pub fn fmt_num(v: u64) -> String {
    if v < 0x10000 {
        v.to_string()
    } else {
        format!("{v:#x}")
    }
}

/// Evaluate `expr`.
///
/// Recursion depth is bounded by the parser, which rejects expressions
/// nested more than [`crate::parser::MAX_EXPR_DEPTH`] deep; a chain of
/// operators of one precedence level (`1 + 1 + … + 1`) is one level,
/// evaluated in a loop.
pub fn eval(expr: &Expr, env: &dyn Env) -> Result<u64, EvalError> {
    match expr {
        Expr::Num(v) => Ok(*v),
        Expr::Var { id, pos } => env.int(*id, *pos),
        Expr::Neg(inner) => Ok(eval(inner, env)?.wrapping_neg()),
        Expr::Chain { first, rest } => {
            let mut acc = eval(first, env)?;
            for (op, rhs, pos) in rest {
                let b = eval(rhs, env)?;
                acc = binary(*op, acc, b).map_err(|m| EvalError::new(*pos, m))?;
            }
            Ok(acc)
        }
        Expr::Call { func, args, pos } => {
            let x = eval(&args[0], env)?;
            let a = eval(&args[1], env)?;
            builtin(*func, x, a).map_err(|m| EvalError::new(*pos, m))
        }
    }
}

/// Apply a binary operator with overflow checking.
pub fn binary(op: BinOp, a: u64, b: u64) -> Result<u64, String> {
    let sym = op.symbol();
    let show = || format!("{} {sym} {}", fmt_num(a), fmt_num(b));
    match op {
        BinOp::Add => a
            .checked_add(b)
            .ok_or_else(|| format!("arithmetic overflow: {} exceeds 64 bits", show())),
        BinOp::Sub => a
            .checked_sub(b)
            .ok_or_else(|| format!("arithmetic underflow: {} is negative", show())),
        BinOp::Mul => a
            .checked_mul(b)
            .ok_or_else(|| format!("arithmetic overflow: {} exceeds 64 bits", show())),
        BinOp::Div => a
            .checked_div(b)
            .ok_or_else(|| format!("division by zero: {}", show())),
        BinOp::Rem => a
            .checked_rem(b)
            .ok_or_else(|| format!("division by zero: {}", show())),
        BinOp::Shl => {
            let shift = u32::try_from(b).ok().filter(|&s| s < 64).ok_or_else(|| {
                format!(
                    "shift amount {} is not less than 64 in {}",
                    fmt_num(b),
                    show()
                )
            })?;
            let r = a << shift;
            if r >> shift == a {
                Ok(r)
            } else {
                Err(format!("arithmetic overflow: {} loses bits", show()))
            }
        }
        BinOp::Shr => {
            let shift = u32::try_from(b).ok().filter(|&s| s < 64).ok_or_else(|| {
                format!(
                    "shift amount {} is not less than 64 in {}",
                    fmt_num(b),
                    show()
                )
            })?;
            Ok(a >> shift)
        }
        BinOp::And => Ok(a & b),
        BinOp::Or => Ok(a | b),
    }
}

/// Apply a builtin function.
pub fn builtin(func: Builtin, x: u64, align: u64) -> Result<u64, String> {
    let name = func.name();
    if !align.is_power_of_two() {
        return Err(format!(
            "{name}: alignment {} is not a power of two",
            fmt_num(align)
        ));
    }
    let mask = align - 1;
    match func {
        Builtin::AlignDown => Ok(x & !mask),
        Builtin::AlignUp => x.checked_add(mask).map(|v| v & !mask).ok_or_else(|| {
            format!(
                "arithmetic overflow: {name}({}, {}) exceeds 64 bits",
                fmt_num(x),
                fmt_num(align)
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoVars;
    impl Env for NoVars {
        fn int(&self, _id: NameId, pos: Pos) -> Result<u64, EvalError> {
            Err(EvalError::new(pos, "no variables"))
        }
    }

    #[test]
    fn checked_operators() {
        assert_eq!(binary(BinOp::Add, 1, 2), Ok(3));
        assert!(binary(BinOp::Add, u64::MAX, 1)
            .unwrap_err()
            .contains("overflow"));
        assert!(binary(BinOp::Sub, 1, 2)
            .unwrap_err()
            .contains("underflow: 1 - 2"));
        assert!(binary(BinOp::Mul, 1 << 40, 1 << 30).is_err());
        assert!(binary(BinOp::Div, 1, 0)
            .unwrap_err()
            .contains("division by zero"));
        assert!(binary(BinOp::Rem, 1, 0).is_err());
        assert_eq!(binary(BinOp::Shl, 1, 63), Ok(1 << 63));
        assert!(binary(BinOp::Shl, 2, 63)
            .unwrap_err()
            .contains("loses bits"));
        assert!(binary(BinOp::Shl, 1, 64)
            .unwrap_err()
            .contains("not less than 64"));
        assert!(binary(BinOp::Shr, 1, u64::MAX).is_err());
        assert_eq!(binary(BinOp::Shr, 0x100, 4), Ok(0x10));
        assert_eq!(binary(BinOp::And, 0xff, 0x0f), Ok(0x0f));
        assert_eq!(binary(BinOp::Or, 0xf0, 0x0f), Ok(0xff));
        assert_eq!(binary(BinOp::Rem, 7, 4), Ok(3));
    }

    #[test]
    fn builtins() {
        assert_eq!(builtin(Builtin::AlignUp, 0x1001, 0x1000), Ok(0x2000));
        assert_eq!(builtin(Builtin::AlignUp, 0x1000, 0x1000), Ok(0x1000));
        assert_eq!(builtin(Builtin::AlignDown, 0x1fff, 0x1000), Ok(0x1000));
        assert!(builtin(Builtin::AlignUp, 1, 3)
            .unwrap_err()
            .contains("not a power of two"));
        assert!(builtin(Builtin::AlignDown, 1, 0).is_err());
        assert!(builtin(Builtin::AlignUp, u64::MAX, 0x1000)
            .unwrap_err()
            .contains("overflow"));
    }

    #[test]
    fn negation_wraps_for_masks() {
        let pos = Pos { line: 1, column: 1 };
        let e = Expr::Chain {
            first: Box::new(Expr::Num(0x12345)),
            rest: vec![(BinOp::And, Expr::Neg(Box::new(Expr::Num(0x1000))), pos)],
        };
        assert_eq!(eval(&e, &NoVars), Ok(0x12000));
        let v = Expr::Var {
            id: NameId(0),
            pos: Pos { line: 2, column: 7 },
        };
        assert_eq!(
            eval(&v, &NoVars).unwrap_err().to_string(),
            "2:7: no variables"
        );
    }
}
