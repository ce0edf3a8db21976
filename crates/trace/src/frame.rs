//! A table in memory, column by column: what a Parquet segment decodes into, what the writer
//! encodes, and what `cufall export` writes as Parquet or CSV.
//!
//! Deliberately small: the trace's tables have seven column types and no nesting, and every
//! query cufall runs is a pass over rows, written as a loop by its caller. A [`Frame`] is a list
//! of named [`Column`]s of equal length; a column holds one [`Values`] vector and, where the
//! column may hold nulls, a validity mask (a null slot holds the type's default in `values`).

/// Why the rows of one file do not fit those of the files before it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("column `{column}` changes type between files")]
    TypeChanged { column: String },
    /// The names of the columns the new file has and the others lack, and the other way round
    /// (both empty: the same columns in another order).
    #[error("{}", columns_text(extra, lacking))]
    Columns {
        extra: Vec<String>,
        lacking: Vec<String>,
    },
}

fn columns_text(extra: &[String], lacking: &[String]) -> String {
    let list = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (extra.is_empty(), lacking.is_empty()) {
        (true, true) => "its columns come in another order".into(),
        (false, true) => format!("it has columns they lack: {}", list(extra)),
        (true, false) => format!("it lacks their columns {}", list(lacking)),
        (false, false) => format!(
            "it has columns they lack ({}) and lacks their columns {}",
            list(extra),
            list(lacking)
        ),
    }
}

/// The type of a column, as the trace's schema names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    U16,
    U32,
    U64,
    I64,
    F32,
    F64,
    Str,
}

/// One column of a table's schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: ColumnType,
    /// Whether the column may hold nulls.
    pub nullable: bool,
}

impl Field {
    pub fn new(name: impl Into<String>, ty: ColumnType, nullable: bool) -> Self {
        Field {
            name: name.into(),
            ty,
            nullable,
        }
    }
}

/// The values of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::U16(v) => v.len(),
            Values::U32(v) => v.len(),
            Values::U64(v) => v.len(),
            Values::I64(v) => v.len(),
            Values::F32(v) => v.len(),
            Values::F64(v) => v.len(),
            Values::Str(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ty(&self) -> ColumnType {
        match self {
            Values::U16(_) => ColumnType::U16,
            Values::U32(_) => ColumnType::U32,
            Values::U64(_) => ColumnType::U64,
            Values::I64(_) => ColumnType::I64,
            Values::F32(_) => ColumnType::F32,
            Values::F64(_) => ColumnType::F64,
            Values::Str(_) => ColumnType::Str,
        }
    }

    /// An empty vector of type `ty`.
    pub fn empty(ty: ColumnType) -> Self {
        match ty {
            ColumnType::U16 => Values::U16(Vec::new()),
            ColumnType::U32 => Values::U32(Vec::new()),
            ColumnType::U64 => Values::U64(Vec::new()),
            ColumnType::I64 => Values::I64(Vec::new()),
            ColumnType::F32 => Values::F32(Vec::new()),
            ColumnType::F64 => Values::F64(Vec::new()),
            ColumnType::Str => Values::Str(Vec::new()),
        }
    }
}

/// A type a column can hold (all but strings, which [`Column::str`] reads).
pub trait Element: Copy + Default + 'static {
    /// The column type holding this element type.
    const TYPE: ColumnType;
    fn wrap(v: Vec<Self>) -> Values;
    fn slice(v: &Values) -> Option<&[Self]>;
    fn take(v: Values) -> Option<Vec<Self>>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const TYPE: ColumnType = ColumnType::$variant;
            fn wrap(v: Vec<Self>) -> Values {
                Values::$variant(v)
            }
            fn slice(v: &Values) -> Option<&[Self]> {
                match v {
                    Values::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn take(v: Values) -> Option<Vec<Self>> {
                match v {
                    Values::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}

element!(u16, U16);
element!(u32, U32);
element!(u64, U64);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);

/// A named column.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub values: Values,
    /// `Some` where the column may hold nulls: `false` marks a null slot.
    pub valid: Option<Vec<bool>>,
}

impl Column {
    /// A column without nulls.
    pub fn new<T: Element>(name: &str, values: Vec<T>) -> Self {
        Column {
            name: name.to_string(),
            values: T::wrap(values),
            valid: None,
        }
    }

    /// A column that may hold nulls.
    pub fn optional<T: Element>(name: &str, values: impl IntoIterator<Item = Option<T>>) -> Self {
        let (values, valid): (Vec<T>, Vec<bool>) = values
            .into_iter()
            .map(|v| (v.unwrap_or_default(), v.is_some()))
            .unzip();
        Column {
            name: name.to_string(),
            values: T::wrap(values),
            valid: Some(valid),
        }
    }

    /// A column of strings without nulls.
    pub fn strings<S: Into<String>>(name: &str, values: impl IntoIterator<Item = S>) -> Self {
        Column {
            name: name.to_string(),
            values: Values::Str(values.into_iter().map(Into::into).collect()),
            valid: None,
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether row `i` holds a value (not null).
    pub fn is_valid(&self, i: usize) -> bool {
        self.valid
            .as_ref()
            .is_none_or(|v| v.get(i).copied().unwrap_or(false))
    }

    /// Whether the column holds any null.
    pub fn has_nulls(&self) -> bool {
        self.valid.as_ref().is_some_and(|v| v.iter().any(|ok| !ok))
    }

    /// The values as a slice of `T` (null slots hold `T::default()`); `None` for another type.
    pub fn slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(&self.values)
    }

    /// Row `i`, or `None` where it is null, out of range, or of another type.
    pub fn get<T: Element>(&self, i: usize) -> Option<T> {
        if !self.is_valid(i) {
            return None;
        }
        self.slice::<T>()?.get(i).copied()
    }

    /// Row `i` of a string column, or `None` where it is null or of another type.
    pub fn str(&self, i: usize) -> Option<&str> {
        if !self.is_valid(i) {
            return None;
        }
        match &self.values {
            Values::Str(v) => v.get(i).map(String::as_str),
            _ => None,
        }
    }

    /// Appends the rows of `other`, a column of the same type.
    pub fn append(&mut self, other: Column) -> Result<(), AppendError> {
        let (n, m) = (self.len(), other.len());
        match (&mut self.values, other.values) {
            (Values::U16(a), Values::U16(b)) => a.extend(b),
            (Values::U32(a), Values::U32(b)) => a.extend(b),
            (Values::U64(a), Values::U64(b)) => a.extend(b),
            (Values::I64(a), Values::I64(b)) => a.extend(b),
            (Values::F32(a), Values::F32(b)) => a.extend(b),
            (Values::F64(a), Values::F64(b)) => a.extend(b),
            (Values::Str(a), Values::Str(b)) => a.extend(b),
            _ => {
                return Err(AppendError::TypeChanged {
                    column: self.name.clone(),
                });
            }
        }
        match (&mut self.valid, other.valid) {
            (None, None) => {}
            (Some(a), Some(b)) => a.extend(b),
            (Some(a), None) => a.extend(std::iter::repeat_n(true, m)),
            (valid @ None, Some(b)) => {
                let mut a = vec![true; n];
                a.extend(b);
                *valid = Some(a);
            }
        }
        Ok(())
    }

    /// The field this column fills.
    pub fn field(&self) -> Field {
        Field::new(self.name.clone(), self.values.ty(), self.valid.is_some())
    }
}

/// Columns of equal length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub columns: Vec<Column>,
}

impl Frame {
    pub fn new(columns: Vec<Column>) -> Self {
        Frame { columns }
    }

    /// A frame with no rows and these columns.
    pub fn empty(schema: &[Field]) -> Self {
        Frame {
            columns: schema
                .iter()
                .map(|f| Column {
                    name: f.name.clone(),
                    values: Values::empty(f.ty),
                    valid: f.nullable.then(Vec::new),
                })
                .collect(),
        }
    }

    /// Number of rows (that of the first column).
    pub fn height(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn schema(&self) -> Vec<Field> {
        self.columns.iter().map(Column::field).collect()
    }

    /// Appends the rows of `other`, which must have the same columns.
    pub fn append(&mut self, other: Frame) -> Result<(), AppendError> {
        if self.columns.is_empty() {
            *self = other;
            return Ok(());
        }
        if other.names() != self.names() {
            let (mine, theirs) = (self.names(), other.names());
            let names = |of: &[&str], not_in: &[&str]| -> Vec<String> {
                of.iter()
                    .filter(|n| !not_in.contains(n))
                    .map(|n| n.to_string())
                    .collect()
            };
            return Err(AppendError::Columns {
                extra: names(&theirs, &mine),
                lacking: names(&mine, &theirs),
            });
        }
        for (a, b) in self.columns.iter_mut().zip(other.columns) {
            a.append(b)?;
        }
        Ok(())
    }

    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    /// Keeps the rows whose entry in `keep` is true (rows past its end are dropped).
    pub fn retain_rows(&mut self, keep: &[bool]) {
        fn retain<T>(v: &mut Vec<T>, keep: &[bool]) {
            let mut k = keep.iter();
            v.retain(|_| k.next().copied().unwrap_or(false));
        }
        for c in &mut self.columns {
            match &mut c.values {
                Values::U16(v) => retain(v, keep),
                Values::U32(v) => retain(v, keep),
                Values::U64(v) => retain(v, keep),
                Values::I64(v) => retain(v, keep),
                Values::F32(v) => retain(v, keep),
                Values::F64(v) => retain(v, keep),
                Values::Str(v) => retain(v, keep),
            }
            if let Some(valid) = &mut c.valid {
                retain(valid, keep);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_read_as_none_and_values_as_themselves() {
        let c = Column::optional("x", [Some(3u32), None, Some(5)]);
        assert_eq!(c.get::<u32>(0), Some(3));
        assert_eq!(c.get::<u32>(1), None);
        assert_eq!(c.get::<u32>(2), Some(5));
        assert_eq!(c.get::<u32>(3), None);
        assert_eq!(c.get::<u64>(0), None, "another type");
        assert!(c.has_nulls());
        let s = Column::strings("s", ["a", "b"]);
        assert_eq!(s.str(1), Some("b"));
        assert!(!s.has_nulls());
        let f = Frame::new(vec![c, s]);
        assert_eq!(f.height(), 3);
        assert_eq!(f.names(), ["x", "s"]);
    }

    #[test]
    fn frames_of_other_columns_say_which_columns_differ() {
        let mut a = Frame::new(vec![
            Column::new("t", vec![1i64]),
            Column::new("x", vec![1u32]),
        ]);
        let b = Frame::new(vec![
            Column::new("t", vec![2i64]),
            Column::new("y", vec![2u32]),
        ]);
        let why = a.clone().append(b).unwrap_err().to_string();
        assert_eq!(
            why,
            "it has columns they lack (`y`) and lacks their columns `x`"
        );
        let c = Frame::new(vec![
            Column::new("x", vec![2u32]),
            Column::new("t", vec![2i64]),
        ]);
        assert_eq!(
            a.clone().append(c).unwrap_err().to_string(),
            "its columns come in another order"
        );
        let d = Frame::new(vec![Column::new("t", vec![2i64])]);
        assert_eq!(
            a.append(d).unwrap_err().to_string(),
            "it lacks their columns `x`"
        );
    }

    #[test]
    fn retained_rows_keep_their_values_and_nulls() {
        let mut f = Frame::new(vec![
            Column::optional("x", [Some(3u32), None, Some(5)]),
            Column::strings("s", ["a", "b", "c"]),
        ]);
        f.retain_rows(&[false, true, true]);
        assert_eq!(f.height(), 2);
        let x = f.column("x").unwrap();
        assert_eq!((x.get::<u32>(0), x.get::<u32>(1)), (None, Some(5)));
        assert_eq!(f.column("s").unwrap().str(0), Some("b"));
    }
}
