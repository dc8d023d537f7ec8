//! A root module claiming station API 2.0.0, a major this host does not speak.

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait as _;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RString;
use abi_stable::{StableAbi, declare_root_module_statics, export_root_module};

/// The root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    /// Same first field as the real API.
    #[sabi(last_prefix_field)]
    pub metadata: extern "C" fn() -> RString,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "aegis_plugin";
    const NAME: &'static str = "aegis plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("2.0.0");
}

extern "C" fn metadata() -> RString {
    RString::from("incompatible")
}

/// Exports the root module.
#[export_root_module]
pub fn root() -> PluginModuleRef {
    PluginModule { metadata }.leak_into_prefix()
}
