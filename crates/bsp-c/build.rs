//! Compiles the C part of libbsp: the variadic bsp_abort and bsp_vabort,
//! which stable Rust cannot define.

fn main() {
    println!("cargo:rerun-if-changed=src/abort.c");
    println!("cargo:rerun-if-changed=../../include/bsp.h");
    cc::Build::new()
        .file("src/abort.c")
        .include("../../include")
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        // Every object goes in, whether or not Rust code refers to it.
        .link_lib_modifier("+whole-archive")
        .compile("bsp_abort");
}
