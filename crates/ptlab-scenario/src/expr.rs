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
/// The value of `expr` when every variable it reads holds a number and
/// no operation in it fails; `None` otherwise, and then [`eval`] gives the
/// error with its position. The interpreter's per-statement path: no error
/// value is built or passed back through the tree. `var` reads one
/// variable. The operators are [`binary_value`] and [`builtin_value`],
/// the ones [`eval`] uses, so both give the same value.
pub fn eval_quick<F: Fn(NameId) -> Option<u64> + Copy>(expr: &Expr, var: F) -> Option<u64> {
    match expr {
        Expr::Num(v) => Some(*v),
        Expr::Var { id, .. } => var(*id),
        Expr::Neg(inner) => Some(quick_operand(inner, var)?.wrapping_neg()),
        Expr::Chain { first, rest } => {
            let mut acc = quick_operand(first, var)?;
            for (op, rhs, _) in rest {
                acc = binary_value(*op, acc, quick_operand(rhs, var)?)?;
            }
            Some(acc)
        }
        Expr::Call { func, args, .. } => {
            let x = quick_operand(&args[0], var)?;
            let a = quick_operand(&args[1], var)?;
            builtin_value(*func, x, a)
        }
    }
}

/// An operand of [`eval_quick`]: a number or a variable read in place
/// (the common leaves of `heap + i * chunk`), anything else by recursion.
#[inline(always)]
fn quick_operand<F: Fn(NameId) -> Option<u64> + Copy>(expr: &Expr, var: F) -> Option<u64> {
    match expr {
        Expr::Num(v) => Some(*v),
        Expr::Var { id, .. } => var(*id),
        // `i * chunk`: a chain of leaves, in place (no recursive call).
        Expr::Chain { first, rest } if rest.len() == 1 => {
            let a = quick_leaf(first, var)?;
            let (op, rhs, _) = &rest[0];
            let b = quick_leaf(rhs, var)?;
            match (a, b) {
                (Leaf::Value(a), Leaf::Value(b)) => binary_value(*op, a, b),
                _ => eval_quick(expr, var),
            }
        }
        _ => eval_quick(expr, var),
    }
}

/// A leaf's value, [`Leaf::Other`] for any other node.
enum Leaf {
    Value(u64),
    Other,
}

#[inline(always)]
fn quick_leaf<F: Fn(NameId) -> Option<u64> + Copy>(expr: &Expr, var: F) -> Option<Leaf> {
    Some(match expr {
        Expr::Num(v) => Leaf::Value(*v),
        Expr::Var { id, .. } => Leaf::Value(var(*id)?),
        _ => Leaf::Other,
    })
}

/// `a op b`, or `None` when the operation fails (overflow, underflow,
/// division by zero, a shift of 64 or more, a left shift losing bits).
pub fn binary_value(op: BinOp, a: u64, b: u64) -> Option<u64> {
    let shift = || u32::try_from(b).ok().filter(|&s| s < 64);
    match op {
        BinOp::Add => a.checked_add(b),
        BinOp::Sub => a.checked_sub(b),
        BinOp::Mul => a.checked_mul(b),
        BinOp::Div => a.checked_div(b),
        BinOp::Rem => a.checked_rem(b),
        BinOp::Shl => {
            let s = shift()?;
            let r = a << s;
            (r >> s == a).then_some(r)
        }
        BinOp::Shr => Some(a >> shift()?),
        BinOp::And => Some(a & b),
        BinOp::Or => Some(a | b),
    }
}

/// `a op b`, or why it fails.
pub fn binary(op: BinOp, a: u64, b: u64) -> Result<u64, String> {
    binary_value(op, a, b).ok_or_else(|| {
        let sym = op.symbol();
        let show = format!("{} {sym} {}", fmt_num(a), fmt_num(b));
        match op {
            BinOp::Add | BinOp::Mul => format!("arithmetic overflow: {show} exceeds 64 bits"),
            BinOp::Sub => format!("arithmetic underflow: {show} is negative"),
            BinOp::Div | BinOp::Rem => format!("division by zero: {show}"),
            BinOp::Shl if b < 64 => format!("arithmetic overflow: {show} loses bits"),
            // A shift of 64 or more (And and Or never fail).
            BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Or => {
                format!("shift amount {} is not less than 64 in {show}", fmt_num(b))
            }
        }
    })
}

/// `func(x, align)`, or `None` when `align` is not a power of two or
/// aligning up overflows.
pub fn builtin_value(func: Builtin, x: u64, align: u64) -> Option<u64> {
    if !align.is_power_of_two() {
        return None;
    }
    let mask = align - 1;
    match func {
        Builtin::AlignDown => Some(x & !mask),
        Builtin::AlignUp => x.checked_add(mask).map(|v| v & !mask),
    }
}

/// `func(x, align)`, or why it fails.
pub fn builtin(func: Builtin, x: u64, align: u64) -> Result<u64, String> {
    builtin_value(func, x, align).ok_or_else(|| {
        let name = func.name();
        if !align.is_power_of_two() {
            format!("{name}: alignment {} is not a power of two", fmt_num(align))
        } else {
            format!(
                "arithmetic overflow: {name}({}, {}) exceeds 64 bits",
                fmt_num(x),
                fmt_num(align)
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// Variables 0..4: 0 and 1 hold numbers, 2 and 3 have none.
    struct SomeVars;
    impl Env for SomeVars {
        fn int(&self, id: NameId, pos: Pos) -> Result<u64, EvalError> {
            some_var(id).ok_or_else(|| EvalError::new(pos, "no value"))
        }
    }
    fn some_var(id: NameId) -> Option<u64> {
        [Some(0x7f00_0000_1000), Some(3), None, None]
            .get(id.index())
            .copied()
            .flatten()
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        let pos = Pos { line: 1, column: 1 };
        let leaf = prop_oneof![
            prop_oneof![
                Just(0u64),
                Just(1),
                Just(4096),
                Just(63),
                Just(64),
                Just(u64::MAX),
                any::<u64>(),
                0u64..100
            ]
            .prop_map(Expr::Num),
            (0u32..4).prop_map(move |i| Expr::Var { id: NameId(i), pos }),
        ];
        let ops = prop_oneof![
            Just(BinOp::Add),
            Just(BinOp::Sub),
            Just(BinOp::Mul),
            Just(BinOp::Div),
            Just(BinOp::Rem),
            Just(BinOp::Shl),
            Just(BinOp::Shr),
            Just(BinOp::And),
            Just(BinOp::Or)
        ];
        leaf.prop_recursive(4, 24, 3, move |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Neg(Box::new(e))),
                (
                    inner.clone(),
                    proptest::collection::vec((ops.clone(), inner.clone()), 1..3)
                )
                    .prop_map(move |(first, rest)| Expr::Chain {
                        first: Box::new(first),
                        rest: rest.into_iter().map(|(o, e)| (o, e, pos)).collect(),
                    }),
                (
                    prop_oneof![Just(Builtin::AlignUp), Just(Builtin::AlignDown)],
                    inner.clone(),
                    inner
                )
                    .prop_map(move |(func, x, a)| Expr::Call {
                        func,
                        args: Box::new([x, a]),
                        pos,
                    }),
            ]
        })
    }

    proptest! {
        /// The quick path gives `eval`'s value whenever `eval` succeeds,
        /// and gives up (so the caller reports `eval`'s error) whenever it
        /// fails.
        #[test]
        fn quick_eval_agrees(e in arb_expr()) {
            prop_assert_eq!(eval_quick(&e, some_var), eval(&e, &SomeVars).ok());
        }
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
