//! Exports `aegis-policy-static` as a loadable plugin library.
aegis_station_api::export_root!(aegis_policy_static::plugin_module);
