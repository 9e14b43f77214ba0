//! FraudProof::decode + check on arbitrary bytes: canonical, and the
//! verdict of check() does not depend on the order of the evidence.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::FraudProof;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = FraudProof::decode(data) else { return };
    assert_eq!(p.encode(), data, "decode then encode must give the same bytes");
    let verdict = p.check();
    let (accused, round) = (p.accused(), p.round());
    let c = p.canonical();
    assert_eq!(c.check(), verdict, "check() must not depend on the order of the evidence");
    if verdict.is_ok() {
        assert_eq!((c.accused(), c.round()), (accused, round), "a proof accuses one key for one round");
    }
    assert_eq!(c.clone().canonical(), c, "canonical() is idempotent");
    assert_eq!(FraudProof::decode(&c.encode()).as_ref(), Ok(&c));
});
