//! A list of fields written once: [`fields!`] turns it into each field's
//! position, the names the entry reads them by and the one function that
//! writes them in order. The plan (`wire`) and its data point (`metrics`)
//! are declared with it.

/// Separates a list's fields (the plan's, `wire`).
pub const FIELD: char = '\u{0}';
/// Separates the items of a list or pair inside a field.
pub const ITEM: char = '\u{1}';

/// Declares `pub mod $module`, one list of fields joined by [`FIELD`],
/// from its entries in order: `NAME => expr;`
/// writes one field, `A, B => expr;` several (the expression writes the
/// separators between them), `NAME[n] => expr;` `n` fields under one
/// name. The module holds a `pub const` position for each name (from
/// `$start` on), `END` (the position after the last field), `NAMES`
/// (each name with its position, for the entry's layout) and `write`,
/// which writes every entry's expression with a separator between entries
/// (`$out`: the string written to; `$value`: what the fields are read
/// from).
macro_rules! fields {
    (
        $(#[$doc:meta])*
        pub mod $module:ident from $start:expr;
        fn write($out:ident, $value:tt: $ty:ty);
        $(
            $(#[$fdoc:meta])*
            $first:ident $([$width:expr])? $(, $more:ident)* => $write:expr;
        )+
    ) => {
        $(#[$doc])*
        pub mod $module {
            #[allow(unused_imports)]
            use super::*;

            $crate::fields::positions!(@at $start; $( $(#[$fdoc])* $first $([$width])? $(, $more)* ; )+);

            /// Each field's name and position.
            pub const NAMES: &[(&str, usize)] = &[
                $( (stringify!($first), $first), $( (stringify!($more), $more), )* )+
            ];

            /// Writes the fields in order.
            #[inline(always)]
            pub fn write($out: &mut String, $value: $ty) {
                $(
                    if $first != $start {
                        $crate::json::PushAscii::push_ascii($out, $crate::fields::FIELD);
                    }
                    $write;
                )+
            }
        }
    };
}

/// The positions of [`fields!`]' names: each one after the previous
/// name's, `NAME[n]` taking `n`.
macro_rules! positions {
    (@at $at:expr;) => {
        /// The position after the list's last field.
        pub const END: usize = $at;
    };
    (@at $at:expr; $(#[$m:meta])* $name:ident [$width:expr] ; $($rest:tt)*) => {
        $(#[$m])*
        pub const $name: usize = $at;
        $crate::fields::positions!(@at $name + $width; $($rest)*);
    };
    (@at $at:expr; $(#[$m:meta])* $name:ident , $($rest:tt)*) => {
        $(#[$m])*
        pub const $name: usize = $at;
        $crate::fields::positions!(@at $name + 1; $($rest)*);
    };
    (@at $at:expr; $(#[$m:meta])* $name:ident ; $($rest:tt)*) => {
        $(#[$m])*
        pub const $name: usize = $at;
        $crate::fields::positions!(@at $name + 1; $($rest)*);
    };
}

pub(crate) use fields;
pub(crate) use positions;
